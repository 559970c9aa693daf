"""bench/lib/playback.py: the load bench's listener (given arrival times, no clock) and the
timeline of playable audio it reads from real encoded streams."""

from __future__ import annotations

import numpy as np
import pytest

from bench.lib.playback import audio_timeline, simulate_playback
from tts_core.audio.encoders import StreamEncoder


def test_audio_that_always_arrives_ahead_never_underruns():
    # 1 s of audio every 0.5 s: the buffer only grows
    play = simulate_playback([(0.2 + 0.5 * i, 1.0 * (i + 1)) for i in range(8)])
    assert play.start_s == pytest.approx(0.2) and play.underruns == 0 and play.silence_s == 0 and play.audio_s == 8


def test_audio_slower_than_real_time_underruns_with_the_silence_it_leaves():
    # 0.5 s of audio every second: after each half second played, half a second of silence
    play = simulate_playback([(1.0 * i, 0.5 * (i + 1)) for i in range(4)])
    assert play.underruns == 3 and play.silence_s == pytest.approx(1.5)


def test_one_stall_is_one_underrun_of_its_length():
    points = [(0.0, 2.0), (1.0, 3.0), (5.0, 4.0)]  # plays to 3 s of audio at t=3, the next comes at t=5
    play = simulate_playback(points)
    assert play.underruns == 1 and play.silence_s == pytest.approx(2.0)


def test_nothing_playable():
    assert simulate_playback([(0.1, 0.0)]).start_s is None


def _encoded(fmt: str, seconds: float = 1.6) -> tuple[bytes, list[tuple[float, int]]]:
    """A real stream in 80 ms pieces, one arrival per piece at t = its index."""
    encoder = StreamEncoder(fmt, 48_000, 2)
    rng = np.random.default_rng(0)
    data, arrivals = b"", []
    pieces = int(seconds / 0.08)
    for index in range(pieces):
        data += encoder.encode((0.1 * rng.standard_normal((2, 3840))).astype(np.float32))
        arrivals.append((float(index), len(data)))
    data += encoder.finish()
    arrivals.append((float(pieces), len(data)))
    return data, arrivals


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "opus", "aac", "flac"])
def test_the_timeline_grows_with_the_bytes_and_ends_at_the_stream_length(fmt):
    data, arrivals = _encoded(fmt)
    points = audio_timeline(fmt, data, arrivals)
    amounts = [a for _, a in points]
    assert amounts == sorted(amounts)  # never shrinks
    assert amounts[-1] == pytest.approx(1.6, abs=0.06)  # the whole stream (encoder padding aside)
    assert amounts[len(amounts) // 2] < amounts[-1]  # and it was not all there at once
