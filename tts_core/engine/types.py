"""Typed messages between the synthesizer front and the engine thread."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Protocol

import numpy as np

from ..config import SamplingParams
from .pacing import FRAME_S


@dataclass(frozen=True, slots=True)
class Segment:
    """One LM prompt of a request (long text is several segments spoken back to back).

    Args:
        rows: int64 [T, 17] prompt rows.
        max_frames: generation cap for this segment (80 ms frames).
        prime_codes: int64 [F, 16] reference codes to push through the codec first and discard
            (continuation mode: the decoder must continue the reference audio, docs/spec/LM.md §4.4).
        pause_after_s: silence emitted after this segment (0 for the last one).
        prefix_rows: how many leading rows depend only on the voice, not the text.
        text: the text this segment speaks (captions).
        estimated_frames: how many frames it will likely take (players plan their buffering on it).
    """

    rows: np.ndarray
    max_frames: int
    prime_codes: np.ndarray | None = None
    pause_after_s: float = 0.0
    prefix_rows: int = 0  # leading rows shared by every prompt of this voice (KV reusable)
    text: str = ""
    estimated_frames: int = 0


@dataclass(frozen=True, slots=True)
class StreamJob:
    request_id: str
    segments: tuple[Segment, ...]
    sampling: SamplingParams
    seed: int
    submitted_at: float  # time.monotonic() when the caller asked
    notice: str | None = None  # shown to the user with the first chunk (e.g. "clip trimmed to 20 s")

    @property
    def estimated_audio_s(self) -> float:
        """Likely length of the whole output: each segment's estimate (within its cap) plus pauses."""
        return sum(min(s.estimated_frames, s.max_frames) * FRAME_S + s.pause_after_s for s in self.segments)


class StreamStatus(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass(eq=False, slots=True)
class StreamHandle:
    """One request's stream from submit to its end, shared by the caller and the engine: made when
    the request is submitted (its job may still have to be built, `intake.py`), its chunks (or an
    exception, then None) arrive on `outbox`, `cancelled` asks the engine to end it."""

    request_id: str
    job: StreamJob | None = None  # set before the engine admits the stream
    outbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    status: StreamStatus = StreamStatus.WAITING


@dataclass(frozen=True, slots=True)
class EngineStats:
    """An engine's occupancy and counters (`Engine.stats`; `/health` shows them, `/metrics` reads them)."""

    active_streams: int  # streams holding a slot
    queued: int  # streams waiting for one
    max_active_streams: int
    max_queue: int
    submitted: int
    finished: int
    cancelled: int
    refused: int  # turned away with a full queue
    stalled: bool  # its device stopped responding (`stall.py`)

    @property
    def load(self) -> int:
        """Streams the engine holds: running + waiting for a slot."""
        return self.active_streams + self.queued

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of `/health` (field names are the keys)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class PoolStats(EngineStats):
    """Several engines' stats (`pool.EnginePool.stats`): counts summed; stalled only when all are."""

    engines: int = 1
    stalled_engines: int = 0
    per_engine_active: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = EngineStats.as_dict(self)
        out["per_engine_active"] = list(self.per_engine_active)
        return out


class EngineLike(Protocol):
    """What the synthesizer uses of an engine: `engine.Engine` (one device) and `pool.EnginePool`."""

    def submit(self, job: StreamJob) -> StreamHandle:
        """Queue a built job (raises at once when it cannot be taken)."""

    def enqueue(self, request: Any) -> StreamHandle:
        """Queue an `intake.Buildable` whose job the engine thread builds."""

    def cancel(self, handle: StreamHandle) -> None: ...

    def warm_prefix(self, rows: np.ndarray) -> None: ...

    def stats(self) -> EngineStats: ...

    def features(self) -> list: ...

    def close(self, timeout_s: float = 5.0) -> None: ...
