"""`tts_core.audio.stretch`: pitch-preserving, streaming time-stretch on Rubber Band (pedalboard).

What must hold: speed 1 is an exact pass-through; the output has round(n / speed) samples and is
the same whatever the chunking; pitch stays; events stay where the output timeline says; and the
block joins are no worse than the rest of the output (measured against Rubber Band stretching the
whole clip at once, on real speech).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from bench.lib.audio_measures import join_distances, low_band_dips
from tts_core.audio.stretch import MAX_SPEED, MIN_SPEED, Stretcher, block_edge, check_speed, stretch
from tts_core.errors import InvalidRequestError

SR = 48_000


def _tone(freq: float, seconds: float, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    wave = amplitude * (np.sin(2 * np.pi * freq * t) + 0.3 * np.sin(2 * np.pi * 2 * freq * t))
    return np.stack([wave, wave]).astype(np.float32)


def _chunked(pcm: np.ndarray, speed: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    stretcher, parts, at = Stretcher(speed), [], 0
    while at < pcm.shape[1]:
        size = int(rng.integers(1, 9000))
        parts.append(stretcher.push(pcm[:, at : at + size]))
        at += size
    parts.append(stretcher.flush())
    return np.concatenate(parts, axis=1)


def _peak_hz(pcm: np.ndarray) -> float:
    mono = pcm[0] * np.hanning(pcm.shape[1])
    spectrum = np.abs(np.fft.rfft(mono))
    return float(np.fft.rfftfreq(pcm.shape[1], 1 / SR)[np.argmax(spectrum)])


@pytest.fixture(scope="module")
def speech(data_dir: Path) -> np.ndarray:
    """Six seconds of real speech (a preset clip of the shared data), 48 kHz stereo."""
    audio, rate = sf.read(data_dir / "presets" / "en_2.wav", dtype="float32", always_2d=True)
    mono = soxr.resample(audio[:, :1], rate, SR)[: 6 * SR, 0]
    return np.ascontiguousarray(np.stack([mono, mono]), dtype=np.float32)


def test_speed_one_is_an_exact_pass_through() -> None:
    pcm = _tone(220, 0.3)
    stretcher = Stretcher(1.0)
    out = stretcher.push(pcm)
    assert out is pcm  # no copy, no latency
    assert stretcher.flush().shape[1] == 0
    np.testing.assert_array_equal(stretch(pcm, 1.0), pcm)


@pytest.mark.parametrize("bad", [0.2, 4.5, 0.0, -1.0, float("nan"), float("inf"), True, "2", None])
def test_out_of_range_speed_names_the_field(bad) -> None:
    with pytest.raises(InvalidRequestError) as err:
        check_speed(bad)
    assert err.value.param == "speed" and "0.25" in err.value.message and "4" in err.value.message
    with pytest.raises(InvalidRequestError):
        Stretcher(bad)


@pytest.mark.parametrize("speed", [MIN_SPEED, 0.5, 0.8, 1.25, 2.0, MAX_SPEED])
def test_length_and_chunking_invariance(speed: float) -> None:
    pcm = _tone(180, 1.7)
    whole = stretch(pcm, speed)
    assert whole.shape == (2, round(pcm.shape[1] / speed))
    np.testing.assert_array_equal(_chunked(pcm, speed, seed=1), whole)  # bit-identical, any chunking
    np.testing.assert_array_equal(_chunked(pcm, speed, seed=2), whole)
    assert np.isfinite(whole).all()


@pytest.mark.parametrize("samples", [1, 100, 3840, block_edge(1) + 1, block_edge(2) + 4800])
def test_short_and_edge_lengths(samples: int) -> None:
    pcm = _tone(200, samples / SR + 1e-9)[:, :samples]
    for speed in (0.5, 1.5, 4.0):
        out = _chunked(pcm, speed, seed=samples)
        assert out.shape == (2, round(samples / speed))


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_pitch_is_kept(speed: float) -> None:
    pcm = _tone(220, 2.0)
    out = stretch(pcm, speed)
    middle = out[:, out.shape[1] // 4 : 3 * out.shape[1] // 4]
    assert abs(_peak_hz(middle) - 220) < 220 * 0.02  # a plain resample would move it to 110 or 440 Hz


@pytest.mark.parametrize("speed", [0.5, 1.5, 3.0])
def test_an_event_lands_where_the_timeline_says(speed: float) -> None:
    """A click at input second 1.3 is heard at output second 1.3 / speed (captions rely on it)."""
    pcm = np.zeros((2, int(2.5 * SR)), np.float32)
    at = int(1.3 * SR)
    pcm[:, at : at + 96] = np.hanning(96).astype(np.float32)
    out = _chunked(pcm, speed, seed=3)
    heard = int(np.argmax(np.abs(out[0])))
    assert abs(heard - round(at / speed)) < 0.02 * SR, (heard, round(at / speed))


@pytest.mark.parametrize("speed", [0.5, 0.8, 1.25, 2.0, 4.0])
def test_block_joins_are_no_worse_than_the_rest(speech: np.ndarray, speed: float) -> None:
    """Against Rubber Band stretching the whole clip at once, on real speech: band levels near the
    joins are as close to it as elsewhere, the voice's fundamental does not dip at the joins more than
    it does at the same places of the whole-clip stretch, and no join clicks.
    (Cutting the blocks without context and crossfade fails all three by several dB.)"""
    from pedalboard import time_stretch

    ours = stretch(speech, speed)
    whole = time_stretch(speech, SR, speed)[:, : ours.shape[1]]
    joins = [round(block_edge(k) / speed) for k in range(1, 64) if block_edge(k) < speech.shape[1]]
    near, far = join_distances(ours, whole, joins, SR)
    assert len(near) and len(far)
    assert near.mean() < far.mean() + 1.0
    assert low_band_dips(ours, joins, SR).mean() > low_band_dips(whole, joins, SR).mean() - 2.0
    steps = np.abs(np.diff(ours[0]))
    at_joins = max(steps[max(0, j - 240) : j + 240].max() for j in joins if j < len(steps))
    assert at_joins <= np.percentile(steps, 99.99) + 1e-3


def test_push_after_flush_is_an_error() -> None:
    stretcher = Stretcher(1.5)
    stretcher.push(_tone(200, 0.1))
    stretcher.flush()
    with pytest.raises(RuntimeError):
        stretcher.push(_tone(200, 0.1))


def test_output_position_matches_block_edges() -> None:
    stretcher = Stretcher(1.5)
    for k in range(1, 5):
        assert stretcher.output_position(block_edge(k)) == round(block_edge(k) / 1.5)
    assert math.isclose(Stretcher(1.0).output_position(12345), 12345)
