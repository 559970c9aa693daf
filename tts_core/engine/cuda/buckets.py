"""Batch and length buckets of the static step, and its padded host input. Pure functions."""

from __future__ import annotations

import numpy as np


def bucket_sizes(num_slots: int) -> list[int]:
    """Batch-size buckets 1, 2, 4, ... up to the first power of two >= num_slots."""
    if num_slots < 1:
        raise ValueError(f"num_slots must be >= 1, got {num_slots}")
    sizes = [1]
    while sizes[-1] < num_slots:
        sizes.append(2 * sizes[-1])
    return sizes


def pick_bucket(num_rows: int, buckets: list[int]) -> int:
    """Smallest bucket holding `num_rows` rows (buckets ascending)."""
    for size in buckets:
        if size >= num_rows:
            return size
    raise ValueError(f"{num_rows} rows exceed the largest bucket {buckets[-1]}")


def padded_step_input(slots: list[int], uniforms: np.ndarray, has_room: np.ndarray, bucket: int) -> np.ndarray:
    """Host rows of one LM step for a bucket: [bucket, 1 + n_vq + 1] float32 = uniforms | step flag.
    Row s holds slot s; rows not stepped stay zero (flag 0: their state is left alone)."""
    width = uniforms.shape[1] + 1
    rows = np.zeros((bucket, width), np.float32)
    rows[slots, :-1] = uniforms
    rows[slots, -1] = has_room
    return rows


def kv_columns(max_context_rows: int) -> int:
    """KV-cache columns of a static runner: every row a stream may hold, one scratch column that
    rows not advancing in a step write to, rounded up to 16 for aligned attention masks."""
    return -(-(max_context_rows + 1) // 16) * 16


def length_buckets(max_len: int, smallest: int = 128) -> list[int]:
    """Attention lengths captured per batch bucket: powers of two from `smallest`, then `max_len`."""
    sizes = []
    size = smallest
    while size < max_len:
        sizes.append(size)
        size *= 2
    return [*sizes, max_len]
