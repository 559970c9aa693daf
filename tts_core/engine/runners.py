"""One runner per device kind: the static (CUDA-graph) runner on a GPU, the eager one elsewhere."""

from __future__ import annotations

import torch

from .cpu import EagerRunner
from .cuda.static_runner import StaticRunner
from .runner_types import Runner


def build_runner(lm, codec, *, num_slots: int, max_context_rows: int, device: torch.device | str,
                 prefix_cache_size: int = 8, enforce_eager: bool = False, compile: str | None = None,
                 defer: bool = False) -> Runner:
    """The runner for `device`: a `StaticRunner` on CUDA (`enforce_eager`, `compile` and `defer` are
    its options), an `EagerRunner` on a CPU (which has neither graphs nor compile to configure)."""
    if torch.device(device).type == "cuda":
        return StaticRunner(lm, codec, num_slots=num_slots, max_context_rows=max_context_rows, device=device,
                            enforce_eager=enforce_eager, compile=compile, prefix_cache_size=prefix_cache_size,
                            defer=defer)
    return EagerRunner(lm, codec, num_slots=num_slots, max_context_rows=max_context_rows, device=device,
                       prefix_cache_size=prefix_cache_size)
