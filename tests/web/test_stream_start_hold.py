"""studio/speech_output.RawWriter's start hold: a streamed response's first bytes carry the first
chunk's audio to within one codec frame, whatever the encoder keeps back (LAME and aac hold most of
an 80 ms chunk), so a listener who starts playing at the first audio has about a chunk's worth to
play, as with pcm. Real encoders, read by PyAV's demuxer as a client would
(`bench.lib.playback.audio_timeline`)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.lib.playback import audio_timeline
from studio.delivery.speech_output import OutputSpec, RawWriter, SpeechRender
from tts_core.types import AudioChunk, Timings

SR = 48_000
CHUNK = 3840  # one codec frame, the engine's first chunk
FRAME = {"mp3": 1152, "aac": 1024, "opus": 960, "flac": 4608, "pcm": 0, "wav": 0}  # each encoder's step


def _chunks(count: int) -> list[AudioChunk]:
    t = np.arange(count * CHUNK) / SR
    pcm = np.stack([0.3 * np.sin(2 * np.pi * 220 * t), 0.3 * np.sin(2 * np.pi * 330 * t)]).astype(np.float32)
    return [AudioChunk(seq=i, pcm=pcm[:, i * CHUNK:(i + 1) * CHUNK], codes=np.zeros((1, 16), np.int64),
                       is_last=i == count - 1, timings=Timings(first_audio_s=None, elapsed_s=0.0, audio_s=0.0))
            for i in range(count)]


def _outputs(fmt: str, count: int, *, hold: bool) -> list[bytes]:
    writer = RawWriter(SpeechRender(OutputSpec(fmt)), start_hold=hold)
    return [writer(chunk) for chunk in _chunks(count)] + [writer.finish()]


@pytest.mark.parametrize("fmt", ["mp3", "aac", "flac", "opus", "pcm", "wav"])
def test_the_first_bytes_carry_the_first_chunks_audio_and_nothing_is_lost(fmt: str) -> None:
    held, plain = _outputs(fmt, 8, hold=True), _outputs(fmt, 8, hold=False)
    if fmt == "opus":  # each Ogg stream has a random serial number
        assert len(b"".join(held)) == len(b"".join(plain))
    else:
        assert b"".join(held) == b"".join(plain)  # the same bytes, only later
    first = next(i for i, data in enumerate(held) if data)
    assert first <= 1, f"{fmt}: held for {first + 1} chunks"
    data = b"".join(held)
    sent = len(b"".join(held[: first + 1]))
    playable = audio_timeline(fmt, data, [(0.0, sent), (1.0, len(data))])[0][1]
    assert playable > 0 and playable * SR >= CHUNK - FRAME[fmt], f"{fmt}: the first bytes play {playable} s"


@pytest.mark.parametrize("fmt", ["mp3", "aac"])
def test_without_the_hold_these_formats_start_with_less_than_a_chunk(fmt: str) -> None:
    """What the hold is for (if an encoder stops keeping audio back, the hold costs nothing)."""
    plain = _outputs(fmt, 4, hold=False)
    data = b"".join(plain)
    playable = audio_timeline(fmt, data, [(0.0, len(plain[0])), (1.0, len(data))])[0][1]
    assert playable * SR < CHUNK - FRAME[fmt]


def test_pcm_is_never_held() -> None:
    held = _outputs("pcm", 2, hold=True)
    assert len(held[0]) == CHUNK * 2 * 2


@pytest.mark.parametrize("fmt", ["mp3", "flac"])
def test_a_one_chunk_stream_sends_everything_at_its_end(fmt: str) -> None:
    held = _outputs(fmt, 1, hold=True)
    assert held[0] == b"" and held[1]
    assert audio_timeline(fmt, held[1], [(0.0, len(held[1]))])[0][1] >= CHUNK / SR
