"""`Stream`: one request from submit to its last chunk, the one object its caller and the engine share.

The caller makes it (id, sampling, seed, and either its segments or the pure function that builds
them), `Engine.submit`s it and reads it as an iterator of `AudioChunk`s; `cancel()` (any thread) or
`close()` ends it at once and frees its slot. The engine thread builds its segments if needed, runs
it in a slot and books its progress here (the fields below "engine thread only"). Whatever ends it
(last chunk, cancel, failure, refusal) runs its end hooks once. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

import numpy as np

from ..config import SamplingParams
from ..errors import TTSError
from ..types import SAMPLE_RATE_HZ, AudioChunk, Timings
from .pacing import FRAME_S


@dataclass(frozen=True, slots=True)
class Segment:
    """One LM prompt of a stream (long text is several segments spoken back to back).

    Args:
        rows: int64 [T, 17] prompt rows.
        max_frames: generation cap for this segment (80 ms frames).
        prime_codes: int64 [F, 16] reference codes pushed through the codec first and discarded
            (continuation mode: the decoder continues the reference audio, docs/spec/LM.md §4.4).
        pause_after_s: silence emitted after this segment (0 for the last one).
        prefix_rows: leading rows that depend only on the voice (their KV is reusable).
        text: the text this segment speaks (captions).
        estimated_frames: how many frames it will likely take (players plan their buffering on it).
    """

    rows: np.ndarray
    max_frames: int
    prime_codes: np.ndarray | None = None
    pause_after_s: float = 0.0
    prefix_rows: int = 0
    text: str = ""
    estimated_frames: int = 0


class StreamStatus(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"


_ENDED = (StreamStatus.FINISHED, StreamStatus.CANCELLED, StreamStatus.FAILED)


def new_stream_id() -> str:
    """64 random bits as 16 hex digits: the id of `X-Request-Id`, the logs, downloads and metrics."""
    return secrets.token_hex(8)


class Stream:
    """One request's stream; an iterator of its chunks (see the module docstring).

    Args:
        sampling: how its codes are drawn.
        seed: its generator's seed (each stream has its own; no global RNG).
        segments: its prompts, when built already; else `build` makes them on the engine thread.
        build: a pure function returning the segments (text normalisation, tokens, prompt rows).
        notice: something the listener should know (e.g. the clip was trimmed).
        stream_id: its id (default: a new random one).
        submitted_at: `time.monotonic()` when the caller asked (timings count from it).
    """

    def __init__(self, *, sampling: SamplingParams, seed: int, segments: tuple[Segment, ...] | None = None,
                 build: Callable[[], tuple[Segment, ...]] | None = None, notice: str | None = None,
                 stream_id: str | None = None, submitted_at: float | None = None):
        if (segments is None) == (build is None):
            raise ValueError("a Stream needs exactly one of segments and build")
        self.id = stream_id or new_stream_id()
        self.sampling = sampling
        self.seed = seed
        self.segments = segments
        self.notice = notice
        self.submitted_at = time.monotonic() if submitted_at is None else submitted_at
        self.status = StreamStatus.WAITING
        self.error: BaseException | None = None
        self._build = build
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._cancelled = False
        self._on_cancel: Callable[[Stream], None] | None = None  # tells the engine holding it
        self._end_hooks: list[Callable[[Stream], None]] = []
        # ---- engine thread only ----
        self.slot = -1
        self.segment_index = 0
        self.frames_in_segment = 0
        self.segment_done = False
        self.pending_codes: np.ndarray | None = None  # rows [0, num_pending): frames not yet decoded
        self.num_pending = 0
        self.seq = 0
        self.emitted_samples = 0
        self.handed_samples = 0  # audio given to the codec or emitted (ahead of emitted when pipelined)
        self.first_audio_at: float | None = None
        self.estimated_audio_s: float | None = None if segments is None else _estimate(segments)

    def __repr__(self) -> str:
        return f"Stream({self.id}, {self.status.value})"

    def __reduce__(self):
        """A built stream pickles as a fresh one with its id, segments, sampling, seed and clock (ZeroGPU
        sends it to a GPU worker process, where it is submitted to that process's engine)."""
        if self.segments is None:
            raise TypeError("only a built Stream can be pickled: build() it first")
        return (_fresh, (self.id, self.segments, self.sampling, self.seed, self.notice, self.submitted_at))

    # ---- the caller's side (any thread) --------------------------------------------------------

    def __iter__(self) -> Iterator[AudioChunk]:
        return self

    def __next__(self) -> AudioChunk:
        """The next chunk (blocks); errors re-raised as `TTSError`; StopIteration after the last
        chunk or once cancelled."""
        item = self._outbox.get()
        if item is None:
            self._outbox.put(None)  # every later call ends too
            raise StopIteration
        if isinstance(item, TTSError):
            raise item
        if isinstance(item, BaseException):
            raise TTSError(f"synthesis failed: {type(item).__name__}: {item}") from item
        return item

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def ended(self) -> bool:
        return self.status in _ENDED

    def cancel(self) -> None:
        """End the stream now (any thread): its reader stops at once and the engine frees its slot."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            tell = self._on_cancel
        self._outbox.put(None)  # wakes a reader blocked on the next chunk
        if tell is not None:
            tell(self)

    def close(self) -> None:
        """The reader is done: cancel the stream unless it has ended."""
        if not self.ended:
            self.cancel()

    def on_end(self, hook: Callable[[Stream], None]) -> None:
        """Call `hook(stream)` once it has ended (at once if it has); on the thread that ends it."""
        with self._lock:
            if not self.ended:
                self._end_hooks.append(hook)
                return
        hook(self)

    @property
    def first_audio_s(self) -> float | None:
        return None if self.first_audio_at is None else self.first_audio_at - self.submitted_at

    @property
    def audio_s(self) -> float:
        return self.emitted_samples / SAMPLE_RATE_HZ

    # ---- the engine's side ---------------------------------------------------------------------

    def held_by(self, on_cancel: Callable[[Stream], None]) -> None:
        """An engine took it: `on_cancel(self)` is called on cancel (at once if already cancelled)."""
        with self._lock:
            self._on_cancel = on_cancel
            cancelled = self._cancelled
        if cancelled:
            on_cancel(self)

    def build(self) -> None:
        """Make the segments if they are not made yet (a pure function: the engine thread runs it)."""
        if self.segments is None:
            self.segments = tuple(self._build())
            self._build = None
            self.estimated_audio_s = _estimate(self.segments)

    def end(self, status: StreamStatus, error: BaseException | None = None) -> None:
        """Mark it ended: the reader gets `error` (if any) then the end; the end hooks run. Once."""
        with self._lock:
            if self.ended:
                return
            self.status, self.error = status, error
            hooks, self._end_hooks = self._end_hooks, []
        if error is not None:
            self._outbox.put(error)
        self._outbox.put(None)
        for hook in hooks:
            hook(self)

    def push(self, chunk: AudioChunk) -> None:
        self._outbox.put(chunk)

    @property
    def segment(self) -> Segment:
        return self.segments[self.segment_index]

    @property
    def is_final_segment(self) -> bool:
        return self.segment_index == len(self.segments) - 1

    def add_frame(self, codes: np.ndarray) -> None:
        if self.pending_codes is None:
            self.pending_codes = np.empty((16, codes.shape[-1]), codes.dtype)
        elif self.num_pending == len(self.pending_codes):
            self.pending_codes = np.concatenate([self.pending_codes, np.zeros_like(self.pending_codes)])
        self.pending_codes[self.num_pending] = codes
        self.num_pending += 1

    def take_frames(self, count: int) -> np.ndarray:
        """The oldest `count` pending frames [count, 16] (a copy), removed from the pending ones."""
        taken = self.pending_codes[:count].copy()
        left = self.num_pending - count
        self.pending_codes[:left] = self.pending_codes[count : self.num_pending]
        self.num_pending = left
        return taken

    def next_chunk(self, pcm: np.ndarray, codes: np.ndarray, *, is_last: bool, is_pause: bool = False) -> AudioChunk:
        """The stream's next chunk of audio `pcm` [2, S] (made from `codes`), with its timings."""
        now = time.monotonic()
        if self.first_audio_at is None and pcm.shape[1] > 0:
            self.first_audio_at = now
        self.emitted_samples += pcm.shape[1]
        timings = Timings(first_audio_s=self.first_audio_s, elapsed_s=now - self.submitted_at,
                          audio_s=self.emitted_samples / SAMPLE_RATE_HZ)
        chunk = AudioChunk(seq=self.seq, pcm=pcm, codes=codes, is_last=is_last, timings=timings, is_pause=is_pause,
                           segment=self.segment_index, segment_text=self.segments[self.segment_index].text)
        self.seq += 1
        return chunk


def _fresh(stream_id: str, segments: tuple[Segment, ...], sampling: SamplingParams, seed: int, notice: str | None,
           submitted_at: float) -> Stream:
    return Stream(sampling=sampling, seed=seed, segments=segments, notice=notice, stream_id=stream_id,
                  submitted_at=submitted_at)


def _estimate(segments: tuple[Segment, ...]) -> float:
    """Likely length of the whole output: each segment's estimate (within its cap) plus pauses."""
    return sum(min(s.estimated_frames, s.max_frames) * FRAME_S + s.pause_after_s for s in segments)
