"""The engine's LM steps over its running streams, one step ahead where the runner allows.

Step-ahead (a `LaunchingRunner`, the GPU's): each step is launched before the one before is read,
so the device runs it while the engine thread books frames, decodes and emits (the host work of a
step is then hidden behind the next). A stream whose segment ends at a step was already launched
into the next one: that frame is dropped and its draws go back to the stream
(`StaticRunner.collect`), so every stream's codes are those of synchronous steps. Not while a stream
waits for its first chunk (that chunk is decoded with the LM idle), and a stream admitted while a
step is in flight joins the step after it. Otherwise (the CPU's runner) each step is run and
booked at once. Only the engine thread uses this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from .runner_types import LaunchingRunner, Runner
from .stream import Stream


@dataclass(slots=True)
class _Flight:
    """A launched step and the streams it was launched for (with their segment at launch)."""

    ticket: Any  # the runner's, for its `collect`
    lives: list[Stream]
    segments: list[int]


class Lookahead:
    """Runs, or launches and reads, the LM steps of the engine's streams.

    Args:
        runner: the engine's runner.
        live: the engine's running streams by id (read, never changed, here).
    """

    def __init__(self, runner: Runner, live: Mapping[str, Stream]):
        self.runner = runner
        self._live = live
        self.step_ahead = runner.can_step_ahead
        self._launcher = cast(LaunchingRunner, runner) if self.step_ahead else None
        self._inflight: _Flight | None = None
        self._newcomers = False  # streams admitted since the step in flight was launched

    def admitted(self) -> None:
        """New streams are running: they join the step after the one in flight."""
        self._newcomers = True

    def generate(self) -> None:
        """One frame for every running stream (see the module doc)."""
        running = [live for live in self._live.values() if not live.segment_done]
        if self._launcher is None:
            if running:
                is_continue, codes = self.runner.step([live.slot for live in running])
                self._book(running, [True] * len(running), is_continue, codes)
            return
        flight, self._inflight = self._inflight, None
        if flight is not None and self._newcomers:
            self._absorb(flight)
            flight = None
            running = [live for live in running if not live.segment_done]
        if flight is None:
            if not running:
                return
            flight = self._launch(running)
        self._newcomers = False
        if running and all(live.first_audio_at is not None for live in running):
            self._inflight = self._launch(running)
        self._absorb(flight)  # (with no stream left running, only to settle the step in flight)

    def covers(self, live: Stream) -> bool:
        """The step in flight was launched for this stream."""
        return self._inflight is not None and any(other is live for other in self._inflight.lives)

    def settle(self) -> None:
        """Read the step in flight, if any (before a slot it covers is reset or released)."""
        flight, self._inflight = self._inflight, None
        if flight is None:
            return
        try:
            self._absorb(flight)
        except Exception:
            self._launcher.drop_launched()  # the failure reaches the streams through the iteration
            raise

    def forget(self) -> None:
        """After a failed iteration: the steps it launched are never read."""
        self._inflight = None
        if self._launcher is not None:
            self._launcher.drop_launched()

    def _launch(self, lives: list[Stream]) -> _Flight:
        return _Flight(self._launcher.launch([live.slot for live in lives]), lives,
                       [live.segment_index for live in lives])

    def _absorb(self, flight: _Flight) -> None:
        """Read a launched step's frames. A stream that ended its segment, retired or moved to its next
        segment since the launch gets nothing from it."""
        keep = [self._live.get(live.id) is live and not live.segment_done and live.segment_index == index
                for live, index in zip(flight.lives, flight.segments)]
        is_continue, codes = self._launcher.collect(flight.ticket, keep)
        self._book(flight.lives, keep, is_continue, codes)

    def _book(self, lives: list[Stream], keep: Sequence[bool], is_continue: np.ndarray, codes: np.ndarray) -> None:
        """Add each kept stream's frame; a stream that chose stop, reached its cap or filled its
        context ends its segment."""
        for i, live in enumerate(lives):
            if not keep[i]:
                continue
            segment = live.segment
            if not is_continue[i]:
                live.segment_done = True
                continue
            live.add_frame(codes[i])
            live.frames_in_segment += 1
            if live.frames_in_segment >= segment.max_frames or self.runner.context_left(live.slot) <= 0:
                live.segment_done = True
