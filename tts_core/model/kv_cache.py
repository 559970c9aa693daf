"""Key/value caches and the attention over them.

`KVCache` is the global transformer's static cache: per layer K and V [num_slots, heads, max_len,
head_dim] and a host-side length per slot. Each stream owns one slot, only ever read or written
through its own index, so streams never see each other. `LocalKVCache` is the local transformer's
scratch state for one frame. Keys are stored already rotated (as in the reference).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from . import fused_ops


class KVCache:
    """Static per-slot cache of the global transformer: per layer K and V [num_slots, num_heads,
    max_len, head_dim], one slot per concurrent stream, max_len rows (prompt + generated) each."""

    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        num_heads: int,
        max_len: int,
        head_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        if num_slots < 1 or max_len < 1:
            raise ValueError(f"KVCache needs num_slots >= 1 and max_len >= 1, got {num_slots}, {max_len}")
        shape = (num_slots, num_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        # Host-side lengths drive positions and masks without device syncs; a numpy array, since
        # the engine updates one entry per stream per frame (far cheaper than a tensor's).
        self.lengths = np.zeros(num_slots, dtype=np.int64)

    @property
    def num_slots(self) -> int:
        return self.k[0].shape[0]

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2]

    @property
    def device(self) -> torch.device:
        return self.k[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.k[0].dtype

    def length(self, slot: int) -> int:
        return int(self.lengths[slot])

    def reset(self, slot: int) -> None:
        """Forget slot `slot` (its stale rows are masked out by the length; other slots are untouched)."""
        self._check_slot(slot)
        self.lengths[slot] = 0

    def reset_all(self) -> None:
        self.lengths[:] = 0

    def advance(self, slots: list[int], count: int) -> None:
        for slot in slots:
            self.lengths[slot] += count

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} out of range: this cache has {self.num_slots} slots")

    def check_room(self, slots: list[int], count: int) -> None:
        for slot in slots:
            self._check_slot(slot)
            if self.length(slot) + count > self.max_len:
                raise ValueError(
                    f"slot {slot} holds {self.length(slot)} rows; adding {count} "
                    f"exceeds max_len={self.max_len}: "
                    "create the cache with a larger max_len (prompt rows + max frames)"
                )


class PrefillAttender:
    """Appends S rows of one slot starting at `start` and attends causally over the slot's rows."""

    def __init__(self, cache: KVCache, slot: int, start: int, length: int):
        self.cache = cache
        self.slot = slot
        self.start = start
        self.end = start + length
        self.mask = None
        if start > 0:
            # Query i sits at position start + i and sees keys 0..start + i.
            query_pos = torch.arange(start, self.end, device=cache.device)[:, None]
            self.mask = torch.arange(self.end, device=cache.device)[None, :] <= query_pos  # [S, start+S]

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keys, values = self.cache.k[layer], self.cache.v[layer]
        keys[self.slot, :, self.start : self.end] = k[0]  # [nh, S, D]
        values[self.slot, :, self.start : self.end] = v[0]
        if self.mask is None:
            # Fresh slot: the new rows are the whole context, plain causal attention.
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        past_k = keys[self.slot : self.slot + 1, :, : self.end]  # [1, nh, start+S, D]
        past_v = values[self.slot : self.slot + 1, :, : self.end]
        return F.scaled_dot_product_attention(q, past_k, past_v, attn_mask=self.mask)


class DecodeAttender:
    """Appends one row to each of B slots (each at its own length) and attends over each slot's rows."""

    def __init__(self, cache: KVCache, slots: list[int], positions: list[int]):
        device = cache.device
        self.cache = cache
        self.num_keys = max(positions) + 1
        batch = len(slots)
        self.slot_index = torch.tensor(slots, dtype=torch.long, device=device)
        self.pos_index = torch.tensor(positions, dtype=torch.long, device=device)
        # Consecutive slots can be read as a view instead of a gather copy.
        first = slots[0]
        self.slot_range = (first, first + batch) if slots == list(range(first, first + batch)) else None
        self.mask = None
        if len(set(positions)) > 1:
            # Shorter streams must not see the stale rows beyond their own length.
            keys_pos = torch.arange(self.num_keys, device=device)
            self.mask = (keys_pos[None, :] <= self.pos_index[:, None])[:, None, None, :]  # [B, 1, 1, L]

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keys, values = self.cache.k[layer], self.cache.v[layer]
        keys[self.slot_index, :, self.pos_index] = k[:, :, 0]  # [B, nh, D]
        values[self.slot_index, :, self.pos_index] = v[:, :, 0]
        if self.slot_range is not None:
            lo, hi = self.slot_range
            past_k = keys[lo:hi, :, : self.num_keys]  # [B, nh, L, D] view
            past_v = values[lo:hi, :, : self.num_keys]
        else:
            past_k = keys[:, :, : self.num_keys].index_select(0, self.slot_index)
            past_v = values[:, :, : self.num_keys].index_select(0, self.slot_index)
        return F.scaled_dot_product_attention(q, past_k, past_v, attn_mask=self.mask)


class RowDecodeAttender:
    """`DecodeAttender` with each row's attention computed alone over exactly its slot's rows (a
    batched call pads rows, which rounds differently), as two matrix products around a softmax, so
    the result depends neither on the other rows nor on the thread count."""

    def __init__(self, cache: KVCache, slots: list[int], positions: list[int]):
        self.cache = cache
        self.rows = list(zip(slots, positions))
        self.slot_index = torch.tensor(slots, dtype=torch.long, device=cache.device)
        self.pos_index = torch.tensor(positions, dtype=torch.long, device=cache.device)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keys, values = self.cache.k[layer], self.cache.v[layer]
        keys[self.slot_index, :, self.pos_index] = k[:, :, 0]  # [B, nh, D]
        values[self.slot_index, :, self.pos_index] = v[:, :, 0]
        q = q * q.shape[-1] ** -0.5
        out = []
        for row, (slot, pos) in enumerate(self.rows):
            scores = torch.matmul(q[row], keys[slot, :, : pos + 1].transpose(-1, -2))  # [nh, 1, L]
            out.append(torch.matmul(torch.softmax(scores, dim=-1), values[slot, :, : pos + 1]))  # [nh, 1, D]
        return torch.stack(out)


class StaticDecodeAttender:
    """Graph-friendly decode over cache rows 0..B-1: one new key/value per row at `write_pos` [B]
    (device), attention over the first `length` columns under an additive `key_mask`
    [B, 1, 1, length]. No host values, so one capture serves every mix of stream lengths below
    `length` (the engine keeps one capture per length bucket)."""

    def __init__(self, cache: KVCache, write_pos: torch.Tensor, key_mask: torch.Tensor, length: int | None = None):
        self.cache = cache
        self.write_pos = write_pos
        self.key_mask = key_mask
        self.length = cache.max_len if length is None else length
        self._rows: torch.Tensor | None = None  # row ids for the plain path's writes (the fused one needs none)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch = q.shape[0]
        keys, values = self.cache.k[layer][:batch], self.cache.v[layer][:batch]  # [B, nh, L, D] views
        if fused_ops.fused_enabled(q.device) and fused_ops.decode_attention_fits(q, keys, self.key_mask):
            return fused_ops.decode_attention(q, k, v, keys, values, self.write_pos, self.key_mask, self.length)
        if self._rows is None:
            self._rows = torch.arange(batch, device=self.write_pos.device)
        # Written in the full-length view: rows that do not advance write to the last (scratch) column.
        keys[self._rows, :, self.write_pos] = k[:, :, 0]  # [B, nh, D]
        values[self._rows, :, self.write_pos] = v[:, :, 0]
        return F.scaled_dot_product_attention(q, keys[:, :, : self.length], values[:, :, : self.length],
                                              attn_mask=self.key_mask)


class LocalKVCache:
    """Scratch state of the local transformer for one frame of up to `rows` streams: per layer K/V
    [rows, heads, n_vq + 1, head_dim] and per-position constants, so a step reads no host value and
    allocates nothing (eager and graphed alike). Every position is rewritten before it is read.
    Create it with `MossTTSNanoLM.new_local_cache`."""

    def __init__(self, num_layers: int, rows: int, num_heads: int, head_dim: int, cos: torch.Tensor,
                 sin: torch.Tensor, device: torch.device, dtype: torch.dtype):
        positions = cos.shape[0]
        shape = (rows, num_heads, positions, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.rows = rows
        self.key_pos = torch.arange(positions, device=device)  # [P]
        # Separate small tensors per position (aligned inputs, no per-step indexing).
        self.index = [torch.tensor([p], device=device) for p in range(positions)]
        self.cos = [cos[p : p + 1].to(device=device, dtype=dtype).clone() for p in range(positions)]  # [1, D/2]
        self.sin = [sin[p : p + 1].to(device=device, dtype=dtype).clone() for p in range(positions)]

    def keys_values(self, batch: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer views of rows 0..batch-1."""
        if batch > self.rows:
            raise ValueError(f"a frame of {batch} rows needs a local cache of at least {batch} rows, got {self.rows}")
        return [k[:batch] for k in self.k], [v[:batch] for v in self.v]


def attend_local(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                 index: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
    """Local attention at one position: store k, v [B, nh, 1, D] at `index` [1], then attend q over
    positions 0..index (a mask over the fixed P positions, so the shapes never change).
    On CUDA one fused kernel does all of it (`fused_ops.local_attention`)."""
    if fused_ops.fused_enabled(q.device) and fused_ops.local_attention_fits(q, keys):
        return fused_ops.local_attention(q, k, v, keys, values, index)
    keys.index_copy_(2, index, k)
    values.index_copy_(2, index, v)
    visible = (key_pos <= index)[None]  # [1, P]: one query row
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
