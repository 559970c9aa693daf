"""Captions: which text segment is heard when, in the OUTPUT timeline (after any speed change).

Every chunk is tagged with the segment it speaks (a pause belongs to the segment before it).
`CaptionTimeline` gives each segment's `speech.segment` event (docs/PROTOCOL.md §2.4) as soon as its
end is known. Times are seconds of output audio: input sample p is heard at round(p / speed), the
mapping `stretch.Stretcher` keeps exactly at its block edges.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..types import SAMPLE_RATE_HZ, AudioChunk


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """One segment's place in the output: seconds from the start of the audio."""

    index: int
    text: str
    start: float
    end: float

    def event(self) -> dict:
        return {"type": "speech.segment", "index": self.index, "text": self.text,
                "start": round(self.start, 3), "end": round(self.end, 3)}


class CaptionTimeline:
    """Turns the chunk sequence into segment spans, in order, each once. Pure bookkeeping, no I/O."""

    def __init__(self, speed: float = 1.0, sample_rate: int = SAMPLE_RATE_HZ):
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed!r}")
        self.speed = float(speed)
        self.sample_rate = int(sample_rate)
        self._position = 0  # input samples seen
        self._open: tuple[int, str, int, int] | None = None  # index, text, first sample, end sample
        self._last_index = -1

    @property
    def audio_s(self) -> float:
        """Output seconds so far."""
        return self._seconds(self._position)

    def _seconds(self, samples: int) -> float:
        out = samples if self.speed == 1.0 else round(samples / self.speed)
        return out / self.sample_rate

    def push(self, chunk: AudioChunk) -> list[SegmentSpan]:
        """Spans that `chunk` completes (usually none, one at a sentence end)."""
        return self.push_samples(chunk.segment, chunk.segment_text, chunk.pcm.shape[1],
                                 is_pause=chunk.is_pause, is_last=chunk.is_last)

    def push_samples(self, segment: int, text: str, samples: int, *, is_pause: bool = False,
                     is_last: bool = False) -> list[SegmentSpan]:
        done: list[SegmentSpan] = []
        if self._open is not None and (is_pause or segment != self._open[0]):
            done.append(self._close())
        if not is_pause and segment > self._last_index and (samples > 0 or is_last):
            self._open = (segment, text, self._position, self._position)
            self._last_index = segment
        self._position += samples
        if self._open is not None and not is_pause:
            index, open_text, first, _ = self._open
            self._open = (index, open_text, first, self._position)
        if is_last:
            done += self.finish()
        return done

    def finish(self) -> list[SegmentSpan]:
        """The span still open at the end of the stream, if any."""
        return [self._close()] if self._open is not None else []

    def _close(self) -> SegmentSpan:
        assert self._open is not None
        index, text, first, end = self._open
        self._open = None
        return SegmentSpan(index, text, self._seconds(first), self._seconds(end))
