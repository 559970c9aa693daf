"""The clip doctor (`tts_core/voices/clip_check.py`) on the real preset clips, and on the same clips
with noise, music-like tones, clipping, long silences and an unbalanced channel added.

What each case must give is what docs/AUDITION.md documents: clean presets are "good" (jp_2, 2.6 s
long, is "only ... s of speech"), each damage is named in the verdict, and the window skips what
the damage spoiled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tts_core.audio.io import load_audio
from tts_core.voices.clip_check import MAX_WINDOW_S, MIN_WINDOW_S, analyse, crop

PRESETS = ("en_2", "en_3", "en_4", "en_6", "en_8", "jp_2", "zh_1", "zh_10", "zh_3", "zh_4", "zh_6")
SHORT = {"jp_2"}  # 2.6 s long: less than 3 s of speech


@pytest.fixture(scope="module")
def clips(data_dir: Path) -> dict[str, tuple[np.ndarray, int]]:
    return {name: load_audio(data_dir / "presets" / f"{name}.wav") for name in PRESETS}


def _rms(wav: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(wav, dtype=np.float64))))


def _chord(num_samples: int, rate: int, amplitude: float) -> np.ndarray:
    """A held A-minor chord: the steady, tonal background of music."""
    t = np.arange(num_samples) / rate
    return (amplitude * sum(np.sin(2 * np.pi * f * t) for f in (220.0, 261.6, 329.6)) / 3).astype(np.float32)


def _window_ok(window: tuple[float, float], duration_s: float) -> bool:
    start, end = window
    return 0.0 <= start < end <= duration_s + 1e-6 and MIN_WINDOW_S <= end - start <= MAX_WINDOW_S + 0.25


@pytest.mark.parametrize("name", PRESETS)
def test_clean_presets_are_good_and_get_a_3_to_10_s_window(clips, name: str) -> None:
    wav, rate = clips[name]
    report = analyse(wav, rate)
    assert report.clipped_fraction == 0.0 and report.channel_imbalance_db < 1.0
    assert report.snr_db >= 25.0 and report.nonspeech_fraction < 0.05
    if name in SHORT:
        assert report.problems and report.verdict.startswith("only 2.0 s of speech")
        start, end = report.window  # all its speech: from the first word to the last
        assert 0.0 <= start < 0.5 and report.duration_s - 0.3 < end <= report.duration_s
        return
    assert report.verdict == "good", report.verdict
    assert _window_ok(report.window, report.duration_s), report.window
    assert report.speech_seconds >= 3.0
    inside = crop(wav, rate, report.window)
    assert inside.shape[1] == pytest.approx((report.window[1] - report.window[0]) * rate, abs=2)


@pytest.mark.parametrize("name", PRESETS)
def test_noise_is_named_and_measured(clips, name: str) -> None:
    wav, rate = clips[name]
    noise = np.random.default_rng(1).normal(0, _rms(wav) / 10 ** (10 / 20), wav.shape).astype(np.float32)
    report = analyse(wav + noise, rate)  # speech 10 dB above white noise
    assert "noisy" in report.verdict and 5.0 < report.snr_db < 20.0, report.verdict
    assert analyse(wav, rate).snr_db - report.snr_db > 10.0


@pytest.mark.parametrize("name", PRESETS)
def test_music_like_tones_are_named(clips, name: str) -> None:
    wav, rate = clips[name]
    report = analyse(wav + _chord(wav.shape[1], rate, 2 * _rms(wav)), rate)
    assert report.verdict.startswith("music or steady noise"), report.verdict
    assert report.nonspeech_fraction > 0.1


@pytest.mark.parametrize("name", PRESETS)
def test_clipping_is_named(clips, name: str) -> None:
    wav, rate = clips[name]
    report = analyse(np.clip(wav * 8, -1.0, 1.0), rate)
    assert "clipped" in report.verdict and report.clipped_fraction > 0.005, report.verdict
    limited = analyse(np.clip(wav * 8, -0.7, 0.7), rate)  # a limiter's flat tops below full scale
    assert "clipped" in limited.verdict


@pytest.mark.parametrize("name", PRESETS)
def test_long_silences_are_skipped_by_the_window(clips, name: str) -> None:
    wav, rate = clips[name]
    clean = analyse(wav, rate)
    silence = np.zeros((wav.shape[0], 6 * rate), np.float32)
    padded = np.concatenate([silence, wav, silence, silence], axis=1)  # 6 s before, 12 s after
    report = analyse(padded, rate)
    assert "mostly silence" in report.verdict
    assert report.speech_seconds == pytest.approx(clean.speech_seconds, abs=0.15)
    start, end = report.window
    assert start == pytest.approx(clean.window[0] + 6.0, abs=0.15)
    assert end <= 6.0 + clean.duration_s + 0.15 and end - start == pytest.approx(
        clean.window[1] - clean.window[0], abs=0.3)


def test_unbalanced_channels_are_named(clips) -> None:
    wav, rate = clips["en_2"]
    stereo = np.concatenate([wav, wav * 0.1], axis=0)  # right channel 20 dB down
    report = analyse(stereo, rate)
    assert report.channel_imbalance_db == pytest.approx(20.0, abs=0.1)
    assert report.verdict.startswith("channels 20 dB apart")
    assert analyse(np.concatenate([wav, wav], axis=0), rate).verdict == "good"


def test_the_window_avoids_the_spoiled_part(clips) -> None:
    wav, rate = clips["en_6"]
    spoiled = wav + _chord(wav.shape[1], rate, 2 * _rms(wav))
    gap = np.zeros((1, rate // 2), np.float32)
    report = analyse(np.concatenate([spoiled, gap, wav], axis=1), rate)  # music, then the clean take
    clean_start = (wav.shape[1] + gap.shape[1]) / rate
    assert report.window[0] >= clean_start - 0.15 and report.window[1] - report.window[0] >= MIN_WINDOW_S
    report = analyse(np.concatenate([wav, gap, spoiled], axis=1), rate)  # the clean take first
    assert report.window[1] <= wav.shape[1] / rate + 0.15


def test_the_report_is_the_apis_analysis(clips) -> None:
    wav, rate = clips["en_3"]
    shown = analyse(wav, rate).as_dict()
    assert set(shown) >= {"speech_seconds", "clipped_fraction", "snr_db", "window", "verdict"}
    assert shown["verdict"] == "good" and len(shown["window"]) == 2
    assert all(isinstance(shown[key], float) for key in ("speech_seconds", "clipped_fraction", "snr_db"))


def test_silence_and_a_steady_tone_alone() -> None:
    rate = 16_000
    silent = analyse(np.zeros((1, 4 * rate), np.float32), rate)
    assert silent.speech_seconds == 0.0 and "only 0.0 s of speech" in silent.verdict
    tone = analyse(_chord(5 * rate, rate, 0.3)[None], rate)
    assert tone.speech_seconds < 0.5 and tone.verdict.startswith("music or steady noise")
