"""`tts_core.audio.timeline`: caption spans in the output timeline, from the engine's chunk tags."""

from __future__ import annotations

import numpy as np
import pytest

from tts_core.audio.timeline import CaptionTimeline, SegmentSpan
from tts_core.types import AudioChunk, Timings

SR = 48_000


def _chunk(segment: int, seconds: float, *, pause: bool = False, last: bool = False, text: str | None = None,
           seq: int = 0) -> AudioChunk:
    return AudioChunk(seq=seq, pcm=np.zeros((2, round(seconds * SR)), np.float32), codes=np.zeros((0, 16), np.int64),
                      is_last=last, timings=Timings(None, 0.0, 0.0), is_pause=pause, segment=segment,
                      segment_text=text if text is not None else f"sentence {segment}.")


def _run(chunks: list[AudioChunk], speed: float = 1.0) -> list[SegmentSpan]:
    timeline = CaptionTimeline(speed)
    spans: list[SegmentSpan] = []
    for chunk in chunks:
        spans += timeline.push(chunk)
    return spans + timeline.finish()


# Two sentences with a pause between them, the first in three chunks; the stream ends with an empty chunk.
STREAM = [_chunk(0, 0.16), _chunk(0, 0.4), _chunk(0, 0.24), _chunk(0, 0.3, pause=True), _chunk(1, 0.8),
          _chunk(1, 0.0, last=True)]


def test_spans_in_order_with_pauses_as_time_only() -> None:
    spans = _run(STREAM)
    assert [s.index for s in spans] == [0, 1]
    assert [s.text for s in spans] == ["sentence 0.", "sentence 1."]
    assert spans[0].start == 0 and spans[0].end == pytest.approx(0.8)
    assert spans[1].start == pytest.approx(1.1) and spans[1].end == pytest.approx(1.9)  # after the 0.3 s pause
    assert spans[0].event() == {"type": "speech.segment", "index": 0, "text": "sentence 0.", "start": 0.0,
                                "end": 0.8}


@pytest.mark.parametrize("speed", [0.5, 1.5, 4.0])
def test_times_follow_the_speed(speed: float) -> None:
    slow, fast = _run(STREAM), _run(STREAM, speed)
    for a, b in zip(slow, fast):
        assert b.start == pytest.approx(a.start / speed, abs=1 / SR)
        assert b.end == pytest.approx(a.end / speed, abs=1 / SR)


def test_a_span_is_given_as_soon_as_its_end_is_known() -> None:
    timeline = CaptionTimeline()
    assert timeline.push(STREAM[0]) == [] and timeline.push(STREAM[1]) == [] and timeline.push(STREAM[2]) == []
    first = timeline.push(STREAM[3])  # the pause closes sentence 0
    assert [s.index for s in first] == [0]
    assert timeline.push(STREAM[4]) == []
    assert [s.index for s in timeline.push(STREAM[5])] == [1]  # the last chunk closes the stream
    assert timeline.finish() == []
    assert timeline.audio_s == pytest.approx(1.9)


def test_next_segment_without_a_pause_and_each_segment_once() -> None:
    chunks = [_chunk(0, 0.2), _chunk(1, 0.2), _chunk(2, 0.2, last=True)]
    spans = _run(chunks)
    assert [(s.index, s.start, s.end) for s in spans] == [(0, 0.0, 0.2), (1, 0.2, 0.4), (2, 0.4, pytest.approx(0.6))]


def test_a_segment_with_no_audio_still_gets_its_caption() -> None:
    spans = _run([_chunk(0, 0.2), _chunk(1, 0.0, last=True)])
    assert [(s.index, s.start, s.end) for s in spans] == [(0, 0.0, 0.2), (1, 0.2, 0.2)]


def test_bad_speed() -> None:
    with pytest.raises(ValueError):
        CaptionTimeline(0)
