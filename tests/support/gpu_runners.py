"""What the GPU tests share besides their fixtures: the device and how a test runner is built."""

from __future__ import annotations

import torch

CUDA = torch.device("cuda")
MAX_ROWS = 240  # the longest test stream: a 178-row prompt and 60 frames


def build_runner(models, num_slots: int, **kwargs):
    """A static runner on the GPU (`bench.lib.runners.static_runner`: `batch_invariant=True` and the
    runner's own options)."""
    from bench.lib.runners import static_runner

    return static_runner(models, num_slots, max_context_rows=MAX_ROWS, device=CUDA, **kwargs)
