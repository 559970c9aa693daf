"""Pitch-preserving time-stretch of a 48 kHz stream by `speed` in [0.25, 4], on Rubber Band.

The stream is cut into blocks on a fixed grid of input positions, never at chunk boundaries, so the
output depends only on the samples (streamed and buffered responses are the same audio). Each block
is stretched with real context on both sides and keeps its exact share of the output (input sample p
at round(p / speed)) plus a crossfade, phase-aligned, into the next. The first audio waits for
FIRST_BLOCK_SAMPLES + CONTEXT_SAMPLES of input; `speed == 1.0` is an exact pass-through.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidRequestError
from ..types import SAMPLE_RATE_HZ

MIN_SPEED = 0.25
MAX_SPEED = 4.0
FIRST_BLOCK_SAMPLES = 9_600  # 0.2 s: the first block is short, so the first audio comes early
BLOCK_SAMPLES = 24_000  # 0.5 s
CONTEXT_SAMPLES = 4_800  # 0.1 s of input each side of a block, stretched but not kept
CROSSFADE_SAMPLES = 480  # 10 ms of output shared by two consecutive blocks
MAX_SHIFT_SAMPLES = 240  # a block may slide 5 ms to meet the previous one in phase


def check_speed(speed: object, param: str = "speed") -> float:
    """`speed` as a float in [MIN_SPEED, MAX_SPEED], else InvalidRequestError naming `param`."""
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise InvalidRequestError(
            f"{param} {speed!r} is out of range: send a number from {MIN_SPEED} to {MAX_SPEED:g} "
            "(1.0 is the natural rate, 2.0 twice as fast)",
            param=param, code="invalid_value",
        )
    return float(speed)


def block_edge(index: int) -> int:
    """Input position where block `index` starts (block 0 at 0, then a short block, then even ones)."""
    if index <= 0:
        return 0
    return FIRST_BLOCK_SAMPLES + (index - 1) * BLOCK_SAMPLES


def _fade_in(length: int) -> np.ndarray:
    # sin² + cos² = 1: the two renders are nearly the same signal, so their weights sum to one.
    return (np.sin(0.5 * np.pi * (np.arange(length) + 0.5) / length) ** 2).astype(np.float32)


def _best_shift(tail: np.ndarray, render: np.ndarray, at: int) -> int:
    """How far (at most MAX_SHIFT_SAMPLES) to slide `render` so that its samples from `at` line up
    with `tail`, the previous block's render of the same stretch: two Rubber Band runs need not agree
    on phase, and crossfading two waves half a period apart would dip the voice's fundamental."""
    want = tail.sum(axis=0, dtype=np.float64)
    lo = max(0, at - MAX_SHIFT_SAMPLES)
    have = render[:, lo : at + MAX_SHIFT_SAMPLES + want.shape[0]].sum(axis=0, dtype=np.float64)
    if have.shape[0] < want.shape[0] or float(want @ want) < 1e-8:
        return 0
    dots = np.correlate(have, want, mode="valid")
    energy = np.convolve(have * have, np.ones(want.shape[0]), mode="valid")
    score = dots / np.sqrt(np.maximum(energy, 1e-12))
    return int(np.argmax(score)) + lo - at


class Stretcher:
    """Streams float32 [C, n] chunks through a pitch-preserving time-stretch: `push(pcm)` returns the
    output final so far (maybe empty), `flush()` the rest; n input samples give round(n / speed)
    output samples whatever the chunking. Not thread-safe: one per stream."""

    def __init__(self, speed: float, sample_rate: int = SAMPLE_RATE_HZ):
        self.speed = check_speed(speed)
        self.sample_rate = int(sample_rate)
        self._pending: np.ndarray | None = None  # input from position self._pending_start on
        self._pending_start = 0
        self._total = 0  # input samples pushed
        self._block = 0  # next block to render
        self._tail: np.ndarray | None = None  # the last block's render of the next crossfade
        self._done = False

    @property
    def passthrough(self) -> bool:
        return self.speed == 1.0

    def output_position(self, input_samples: int) -> int:
        """Where input sample `input_samples` lands in the output (exact at block edges)."""
        return input_samples if self.passthrough else round(input_samples / self.speed)

    def push(self, pcm: np.ndarray) -> np.ndarray:
        if self._done:
            raise RuntimeError("Stretcher.push after flush")
        if self.passthrough:
            return pcm
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.ndim != 2:
            raise ValueError(f"pcm must be [channels, samples], got shape {list(pcm.shape)}")
        if pcm.shape[1] == 0:
            return pcm
        self._pending = pcm if self._pending is None else np.concatenate([self._pending, pcm], axis=1)
        self._total += pcm.shape[1]
        out = []
        while self._total >= self._input_needed(self._block):
            out.append(self._render(last=False))
        return self._joined(out, pcm.shape[0])

    def flush(self) -> np.ndarray:
        """The rest of the output (the last block, shorter, with no right context)."""
        if self._done or self.passthrough:
            self._done = True
            return np.zeros((self._pending.shape[0] if self._pending is not None else 2, 0), np.float32)
        self._done = True
        if self._pending is None or block_edge(self._block) >= self._total:
            return np.zeros((self._pending.shape[0] if self._pending is not None else 2, 0), np.float32)
        return self._render(last=True)

    # ---- blocks ---------------------------------------------------------------------------------

    def _input_needed(self, block: int) -> int:
        """Input a block needs before it can be rendered: its end, the crossfade, the right context."""
        out_end = self.output_position(block_edge(block + 1)) + CROSSFADE_SAMPLES
        return math.ceil(out_end * self.speed) + CONTEXT_SAMPLES

    def _render(self, *, last: bool) -> np.ndarray:
        from pedalboard import time_stretch  # imported on first use: speed 1.0 never needs it

        assert self._pending is not None
        start, end = block_edge(self._block), block_edge(self._block + 1)
        out_start = self.output_position(start)
        out_end = self.output_position(self._total) if last else self.output_position(end)
        keep_end = out_end if last else out_end + CROSSFADE_SAMPLES
        run_from = max(0, start - CONTEXT_SAMPLES)
        run_to = self._total if last else min(self._total, self._input_needed(self._block))
        source = self._pending[:, run_from - self._pending_start : run_to - self._pending_start]
        stretched = time_stretch(np.ascontiguousarray(source), self.sample_rate, self.speed)
        if stretched.ndim != 2 or stretched.shape[0] != source.shape[0]:  # a few samples can come back as none
            stretched = np.zeros((source.shape[0], 0), np.float32)
        offset = run_from / self.speed  # output position of the run's first sample
        shift = 0 if self._tail is None else _best_shift(self._tail, stretched, round(out_start - offset))

        def take(first: int, stop: int) -> np.ndarray:
            at = round(first - offset) + shift
            piece = stretched[:, at : at + stop - first]
            if piece.shape[1] < stop - first:  # Rubber Band may round one sample short at the very end
                piece = np.pad(piece, ((0, 0), (0, stop - first - piece.shape[1])))
            return piece

        body = np.array(take(out_start, out_end), dtype=np.float32)
        if self._tail is not None:
            n = min(self._tail.shape[1], body.shape[1])
            fade = _fade_in(self._tail.shape[1])[:n]
            body[:, :n] = self._tail[:, :n] * (1.0 - fade) + body[:, :n] * fade
        self._tail = None if last else take(out_end, keep_end)
        self._block += 1
        keep_from = max(0, block_edge(self._block) - CONTEXT_SAMPLES)  # the next block's left context
        self._pending = self._pending[:, keep_from - self._pending_start :]
        self._pending_start = keep_from
        return body

    @staticmethod
    def _joined(parts: list[np.ndarray], channels: int) -> np.ndarray:
        if not parts:
            return np.zeros((channels, 0), np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def stretch(pcm: np.ndarray, speed: float, sample_rate: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """A whole clip through `Stretcher` (the same audio a stream of its pieces would give)."""
    stretcher = Stretcher(speed, sample_rate)
    head = stretcher.push(pcm)
    tail = stretcher.flush()
    return head if tail.shape[1] == 0 else np.concatenate([head, tail], axis=1)
