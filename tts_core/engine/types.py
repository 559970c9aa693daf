"""Typed messages between the synthesizer front and the engine thread."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from enum import Enum

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


@dataclass(slots=True)
class StreamHandle:
    """The caller's end of a stream: chunks (or an exception, then None) arrive on `outbox`."""

    job: StreamJob
    outbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    status: StreamStatus = StreamStatus.WAITING
