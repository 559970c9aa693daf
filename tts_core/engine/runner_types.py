"""What the engine needs of a runner (the device work over stream slots), as Protocols, and the
runner for a device (`build_runner`).

Two runners implement it: `cpu.EagerRunner` (exact per-slot steps; the CPU's) and
`cuda.static_runner.StaticRunner` (static shapes, buckets, CUDA graphs; the GPU's). A runner whose
`can_step_ahead` is True is also a `LaunchingRunner`: the engine may launch its next step before
reading the last one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from ..config import SamplingParams


class PcmResult(Protocol):
    """A decode's audio, maybe still on its way to the host (`host_copy.ReadyPcm`, `PendingPcm`)."""

    def result(self) -> list[np.ndarray]:
        """One float32 array [2, 3840 n] per decoded slot; call it once."""


class Runner(Protocol):
    """Batched LM frame steps and streaming codec decodes over `num_slots` stream slots. Only the
    engine thread calls it (decodes may run on the codec thread, never two at once)."""

    device: torch.device
    num_slots: int

    @property
    def can_step_ahead(self) -> bool:
        """True for a `LaunchingRunner` (its steps can be launched before the last one is read)."""

    @property
    def step_kind(self) -> str:
        """What the LM step runs as: "eager", "plain", "compiled" or "compiled+graphs"."""

    @property
    def uses_graphs(self) -> bool: ...

    @property
    def compile_mode(self) -> str:
        """How the step's units run: "inductor" or "off" (`static_step.compile_mode`)."""

    def begin_stream(self, slot: int, sampling: SamplingParams, seed: int) -> None: ...

    def start_segment(self, slot: int, rows: np.ndarray, prime_codes: np.ndarray | None,
                      prefix_rows: int = 0) -> None:
        """Prefill a prompt [T, 17] into the slot and reset (or prime with reference codes) its codec."""

    def release(self, slot: int) -> None: ...

    def context_left(self, slot: int) -> int:
        """KV rows the slot may still add."""

    def warm_prefix(self, rows: np.ndarray) -> bool:
        """Compute and keep a prompt prefix's KV; False when there is nothing to do."""

    def step(self, slots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """One frame per slot: is_continue bool [B], codes int64 [B, 16] (host)."""

    def decode_async(self, slots: Sequence[int], codes: np.ndarray) -> PcmResult:
        """Streaming decode of codes [B, n, 16]; `.result()` gives one pcm array per slot."""

    def decode(self, slots: Sequence[int], codes: np.ndarray) -> list[np.ndarray]:
        """`decode_async(...).result()`."""

    def start(self, wait_quiet: Callable[[], None], when_idle: Callable[..., None]) -> None:
        """The engine runs: a runner that builds a faster step (the CUDA runner's deferred compile)
        starts it now in the background, calling `wait_quiet()` before each piece of work, and hands
        its switch to `when_idle(switch, within_s=...)`, which the engine runs between two steps."""


class LaunchingRunner(Runner, Protocol):
    """A runner whose steps are queued on the device: `launch` returns at once, `collect` waits.
    At most two launched steps may be uncollected; they are collected in launch order."""

    def launch(self, slots: Sequence[int]) -> Any:
        """Start one frame for each slot; returns a ticket for `collect`."""

    def collect(self, ticket: Any, keep: Sequence[bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The launched step's is_continue [B] and codes [B, 16]; `keep[i]` False drops row i's frame
        (nothing booked, its random draws go back to its stream)."""

    def drop_launched(self) -> None:
        """Forget launched steps after a failure (their results will never be read)."""


def build_runner(lm, codec, *, num_slots: int, max_context_rows: int, device: torch.device | str,
                 prefix_cache_size: int = 8, enforce_eager: bool = False, compile: str | None = None,
                 defer: bool = False) -> Runner:
    """The runner for `device`: a `StaticRunner` on CUDA (`enforce_eager`, `compile` and `defer` are
    its options), an `EagerRunner` elsewhere (which has neither graphs nor compile to configure)."""
    from .cpu import EagerRunner
    from .cuda.static_runner import StaticRunner

    if torch.device(device).type == "cuda":
        return StaticRunner(lm, codec, num_slots=num_slots, max_context_rows=max_context_rows, device=device,
                            enforce_eager=enforce_eager, compile=compile, prefix_cache_size=prefix_cache_size,
                            defer=defer)
    return EagerRunner(lm, codec, num_slots=num_slots, max_context_rows=max_context_rows, device=device,
                       prefix_cache_size=prefix_cache_size)
