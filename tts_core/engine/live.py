"""Engine-side state of one running stream (the engine thread's only)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..types import SAMPLE_RATE_HZ, AudioChunk, Timings
from .types import StreamHandle, StreamJob


@dataclass(slots=True, eq=False)  # identity: the engine asks whether a step covers this stream
class LiveStream:
    """Engine-side state of one running stream. What every chunk repeats (the job, its audio
    estimate) is read once here: at 256 streams the per-chunk bookkeeping is a fair share of the
    engine thread's time."""

    handle: StreamHandle
    slot: int
    job: StreamJob = field(init=False)
    estimated_audio_s: float = field(init=False)
    segment_index: int = 0
    frames_in_segment: int = 0
    segment_done: bool = False
    # Frames made but not yet handed to the codec: rows [0, num_pending) of one array per stream
    # (grown when full), so a decode group stacks one slice per stream instead of single rows.
    pending_codes: np.ndarray | None = None
    num_pending: int = 0
    seq: int = 0
    emitted_samples: int = 0
    handed_samples: int = 0  # audio given to the codec or emitted (ahead of `emitted_samples` when pipelined)
    first_audio_at: float | None = None

    def __post_init__(self) -> None:
        self.job = self.handle.job
        self.estimated_audio_s = self.job.estimated_audio_s

    @property
    def is_final_segment(self) -> bool:
        return self.segment_index == len(self.job.segments) - 1

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
        submitted = self.job.submitted_at
        timings = Timings(
            first_audio_s=None if self.first_audio_at is None else self.first_audio_at - submitted,
            elapsed_s=now - submitted,
            audio_s=self.emitted_samples / SAMPLE_RATE_HZ,
        )
        chunk = AudioChunk(seq=self.seq, pcm=pcm, codes=codes, is_last=is_last, timings=timings,
                           is_pause=is_pause, notice=self.job.notice if self.seq == 0 else None,
                           request_id=self.job.request_id, segment=self.segment_index,
                           segment_text=self.job.segments[self.segment_index].text,
                           estimated_audio_s=self.estimated_audio_s)
        self.seq += 1
        return chunk
