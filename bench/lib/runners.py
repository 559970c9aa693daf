"""Runners the tests and benches build that the product does not: the GPU's static runner on a CPU (its functions
run eagerly), traced by torch.compile's aot_eager backend, or batch-invariant; the CPU runner with
each slot stepping alone; and a synchronous view of any runner (no step-ahead).

The product's runners take only what the product sets (`engine/runner_types.build_runner`); these
variants reach their behaviour through subclasses, so no test-only option sits in their signatures.
"""

from __future__ import annotations

import torch

from tts_core.engine.cpu import EagerRunner
from tts_core.engine.cuda.buckets import bucket_sizes, pick_bucket
from tts_core.engine.cuda.static_runner import StaticRunner

CPU = torch.device("cpu")


class TracedStaticRunner(StaticRunner):
    """The step's units traced by torch.compile with the aot_eager backend: the graphs CUDA compiles,
    run without inductor, so tracing is checked quickly on a CPU. `compile_mode` says "aot_eager".
    With `defer`, the units are built when the engine starts its background compile (as the
    product's deferred start); otherwise now."""

    def __init__(self, lm, codec, *, defer: bool = False, **options):
        super().__init__(lm, codec, compile="off", defer=True, **options)
        self.graphs._target_mode = "aot_eager"  # what "inductor" is on CUDA
        if not defer:
            self.graphs.compile_in_background().join()
            self.upgrade()


class _AlonePrefills:
    """A prompt prefilled whole, alone, as it is admitted (never batched with others, never after a
    cached prefix): what `StaticRunner.prefills` does in a batch-invariant runner."""

    def __init__(self, runner: StaticRunner):
        self._runner = runner

    def __len__(self) -> int:
        return 0

    def add(self, slot: int, rows, prefix_rows: int = 0) -> None:
        self._runner._prefill_slot(slot, rows, prefix_rows)  # (no prefix cache: always whole)

    def flush(self) -> None:
        pass

    def discard(self, slot: int) -> None:
        pass

    def warm(self, rows) -> bool:
        return False


class BatchInvariantRunner(StaticRunner):
    """One batch bucket (every step runs all rows) and each prompt prefilled alone: a stream's codes
    are bit-identical whatever runs beside it, in bf16 too, at the cost of full-size steps."""

    def __init__(self, lm, codec, *, num_slots: int, **options):
        rows = max(num_slots, pick_bucket(num_slots, bucket_sizes(num_slots)))
        super().__init__(lm, codec, num_slots=num_slots, buckets=[rows], prefix_cache_size=0, **options)
        self.prefills = _AlonePrefills(self)


def static_runner(models, num_slots: int = 8, *, max_context_rows: int = 600, device: torch.device = CPU,
                  traced: bool = False, batch_invariant: bool = False, **options) -> StaticRunner:
    """A static runner over `models` (lm, codec), on a CPU unless `device` says otherwise:
    `TracedStaticRunner` when `traced`, `BatchInvariantRunner` when `batch_invariant`."""
    kind = TracedStaticRunner if traced else BatchInvariantRunner if batch_invariant else StaticRunner
    lm, codec = models
    return kind(lm, codec, num_slots=num_slots, max_context_rows=max_context_rows, device=device, **options)


class SoloEagerRunner(EagerRunner):
    """The CPU runner's fallback where rows do not come out independent: each slot steps with one row
    and decodes one frame per call on its own (the product takes it when its start-up check fails)."""

    def _prepare_batching(self) -> bool:
        return False


class Synchronous:
    """`runner` stepped synchronously: `can_step_ahead` is False, everything else is the runner's
    (so an engine around it runs and books each step at once, as on the CPU)."""

    can_step_ahead = False

    def __init__(self, runner):
        self._runner = runner

    def __getattr__(self, name: str):
        return getattr(self._runner, name)
