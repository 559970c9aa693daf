"""Prompt prefills of the static (GPU) path: every prompt admitted since the last step, at once.

Flushed before each step: a prompt alone by one graph replay (`prefill_graphs.PrefillGraphs`) when
a captured length fits it; prompts whose voice prefix was computed before get its keys/values
copied into their slots and run only the rows after it (the `prefill_after` unit); the rest go in
right-padded batches through the prefill unit. Prefixes met in a full prefill are kept (`PrefixCache`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from ..prefix_cache import PrefixCache, prefix_key


@dataclass(frozen=True, slots=True)
class PendingPrompt:
    slot: int
    rows: np.ndarray  # [T, 17]
    prefix_rows: int  # leading rows shared by every prompt of the voice (0: none)
    key: str | None  # the prefix's cache key; None when the prompt has no reusable prefix

    @classmethod
    def make(cls, slot: int, rows: np.ndarray, prefix_rows: int) -> PendingPrompt:
        rows = np.asarray(rows, dtype=np.int64)
        key = prefix_key(rows, prefix_rows) if 0 < prefix_rows < rows.shape[0] else None
        return cls(slot, rows, prefix_rows, key)


def _padded(rows: list[np.ndarray]) -> tuple[torch.Tensor, list[int]]:
    """Right-pad prompts to the longest with copies of their last row -> [P, T_max, 17], lengths."""
    lengths = [len(r) for r in rows]
    most = max(lengths)
    stacked = np.stack([np.concatenate([r, np.repeat(r[-1:], most - len(r), 0)]) for r in rows])
    return torch.from_numpy(stacked), lengths


class BatchPrefiller:
    """The pending prompts of a static runner and how they are prefilled, through the runner's
    `cache`, `hidden` [R, H] and `graphs` (its prefill unit and graphs); `prefixes` None always
    prefills whole prompts; `spare_row` is a cache row no stream uses (where `warm` computes)."""

    def __init__(self, lm, cache, hidden: torch.Tensor, graphs, prefixes: PrefixCache | None,
                 spare_row: int | None):
        self.lm = lm
        self.cache = cache
        self.hidden = hidden
        self.graphs = graphs
        self.prefixes = prefixes
        self.spare_row = spare_row
        self._pending: dict[int, PendingPrompt] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, slot: int, rows: np.ndarray, prefix_rows: int = 0) -> None:
        self._pending[slot] = PendingPrompt.make(slot, rows, prefix_rows if self.prefixes is not None else 0)

    def discard(self, slot: int) -> None:
        self._pending.pop(slot, None)

    @torch.inference_mode()
    def flush(self, max_rows_per_pass: int = 32768) -> None:
        if not self._pending:
            return
        prompts = sorted(self._pending.values(), key=lambda p: p.rows.shape[0])
        self._pending.clear()
        if len(prompts) > 1 and self.prefixes is not None:
            prompts = self._after_cached_prefixes(prompts)
        while prompts:
            count = 1
            while count < len(prompts) and (count + 1) * prompts[count].rows.shape[0] <= max_rows_per_pass:
                count += 1
            group, prompts = prompts[:count], prompts[count:]
            if count == 1 and self.graphs.prefill_one(group[0].slot, group[0].rows):
                self.cache.lengths[group[0].slot] = group[0].rows.shape[0]
            else:
                rows, lengths = _padded([p.rows for p in group])
                self._set_hidden([p.slot for p in group], self.lm.prefill_many(
                    rows, lengths, self.cache, [p.slot for p in group], self.graphs.units))
            self._keep_prefixes(group)

    def _after_cached_prefixes(self, prompts: list[PendingPrompt]) -> list[PendingPrompt]:
        """Prefill the prompts whose prefix is cached (copy it, run the rows after it); returns the others."""
        by_key: dict[str, list[PendingPrompt]] = defaultdict(list)
        rest = []
        for prompt in prompts:
            if prompt.key is not None and prompt.key in self.prefixes:
                by_key[prompt.key].append(prompt)
            else:
                rest.append(prompt)
        for key, group in by_key.items():
            slots = [p.slot for p in group]
            slot_index = torch.tensor(slots).to(self.hidden.device, non_blocking=True)
            start = self.prefixes.restore_many(key, self.cache, slot_index)
            rows, lengths = _padded([p.rows[start:] for p in group])
            self._set_hidden(slots, self.lm.prefill_many(rows, lengths, self.cache, slots, self.graphs.units,
                                                         start=start))
        return rest

    def _keep_prefixes(self, group: list[PendingPrompt]) -> None:
        if self.prefixes is None:
            return
        for prompt in group:
            if prompt.key is not None and prompt.key not in self.prefixes:
                self.prefixes.store(prompt.key, self.cache, prompt.slot, prompt.prefix_rows)

    def _set_hidden(self, slots: list[int], hidden: torch.Tensor) -> None:
        self.hidden[torch.tensor(slots).to(self.hidden.device, non_blocking=True)] = hidden

    @torch.inference_mode()
    def warm(self, rows: np.ndarray) -> bool:
        """Compute and keep the KV of a prompt prefix (all of `rows`) in the spare row; False when
        there is no prefix store or spare row, or the prefix is kept already."""
        if self.prefixes is None or self.spare_row is None:
            return False
        key = prefix_key(rows, len(rows))
        if key in self.prefixes:
            return False
        row = self.spare_row
        self.cache.reset(row)
        prompt, lengths = _padded([np.asarray(rows, dtype=np.int64)])
        self.lm.prefill_many(prompt, lengths, self.cache, [row], self.graphs.units)
        self.prefixes.store(key, self.cache, row, len(rows))
        self.cache.reset(row)
        return True
