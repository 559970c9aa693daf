"""Reuse of prompt-prefix KV across requests.

Every voice-clone prompt of one voice starts with the same rows (the template and the reference
audio frames); only the text rows after them differ. The cache keeps the post-RoPE keys/values of
recent prefixes, keyed by a hash of the prefix rows, and copies them into a stream's slot instead
of prefilling them again (most of a CPU request's time to first audio, paid per sentence chunk).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np
import torch


def prefix_key(rows: np.ndarray, num_rows: int) -> str:
    return hashlib.sha1(np.ascontiguousarray(rows[:num_rows], dtype=np.int64).tobytes()).hexdigest()


class PrefixCache:
    """LRU of per-layer (K, V) snapshots [heads, P, head_dim] of at most `capacity` prompt prefixes
    (a full-size fp32 prefix of P rows takes P x 72 KiB)."""

    def __init__(self, capacity: int = 8):
        self.capacity = capacity
        self._entries: OrderedDict[str, list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def restore(self, key: str, cache, slot: int) -> int:
        """Copy a cached prefix into `slot` (positions 0..P-1); returns P, or 0 on a miss."""
        snapshot = self._entries.get(key)
        if snapshot is None:
            return 0
        self._entries.move_to_end(key)
        self.hits += 1
        length = snapshot[0][0].shape[1]
        for layer, (keys, values) in enumerate(snapshot):
            cache.k[layer][slot, :, :length] = keys
            cache.v[layer][slot, :, :length] = values
        cache.reset(slot)
        cache.advance([slot], length)
        return length

    def restore_many(self, key: str, cache, slot_index: torch.Tensor) -> int:
        """Copy a cached prefix into every slot of `slot_index` (long, on the cache's device) at
        positions 0..P-1, one copy per layer for all of them; returns P, or 0 on a miss. The slots'
        host lengths are left to the caller (the prefill that follows sets them)."""
        snapshot = self._entries.get(key)
        if snapshot is None:
            return 0
        self._entries.move_to_end(key)
        self.hits += int(slot_index.numel())
        length = snapshot[0][0].shape[1]
        for layer, (keys, values) in enumerate(snapshot):
            cache.k[layer][slot_index, :, :length] = keys
            cache.v[layer][slot_index, :, :length] = values
        return length

    def store(self, key: str, cache, slot: int, length: int) -> None:
        """Snapshot positions 0..length-1 of `slot` (just prefilled) under `key`."""
        if self.capacity <= 0:
            return
        self._entries[key] = [(k[slot, :, :length].clone(), v[slot, :, :length].clone())
                              for k, v in zip(cache.k, cache.v)]
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
