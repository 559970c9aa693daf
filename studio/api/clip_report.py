"""The clip doctor over HTTP and in the page: a clip's bytes -> its analysis, and the clip cut to a window.

`tts_core/voices/clip_check.py` does the measuring (pure functions on samples); here the bytes are
decoded (`audio.load_audio`, after the hard limits of `clip_decode.check_clip` have passed), the
report becomes the API's `analysis` object, and a window given as text ("auto", "full",
"start,end") is read and applied. Nothing here refuses a clip for being imperfect.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile as sf
from pydantic import BaseModel, Field

from tts_core.audio.io import load_audio
from tts_core.errors import InvalidRequestError
from tts_core.voices.clip_check import ClipAnalysis, analyse, crop

WINDOW_PARAM = "window"
MIN_CHOSEN_S = 0.5  # a window the user picks: shorter than this holds no voice to clone


class ClipAnalysisInfo(BaseModel):
    """What the clip doctor found (docs/AUDITION.md describes the method)."""

    speech_seconds: float = Field(description="Speech once silence is trimmed (pauses under 0.3 s count).")
    clipped_fraction: float = Field(description="Share of samples at full scale or on a limiter's flat top.")
    snr_db: float = Field(description="Speech power over the noise floor, dB (capped at 60).")
    nonspeech_fraction: float = Field(description="Share of the sound that is steady: music, tones, hum.")
    channel_imbalance_db: float = Field(description="Level difference of the two channels, dB (0 for mono).")
    duration_s: float
    window: list[float] = Field(min_length=2, max_length=2,
                                description="[start_s, end_s]: the best clean 3-10 s stretch of the clip.")
    verdict: str = Field(description="'good', or what to fix, problems joined by '; '.")


@dataclass(frozen=True, slots=True)
class CheckedClip:
    """A clip's samples ([C, n] at `sample_rate`) and the doctor's report on them."""

    wav: np.ndarray
    sample_rate: int
    analysis: ClipAnalysis | None  # None: only cut, never measured (`cut`)

    def info(self) -> ClipAnalysisInfo:
        assert self.analysis is not None, "this clip was cut, not analysed"
        return ClipAnalysisInfo(**self.analysis.as_dict())


def check(data: bytes) -> CheckedClip:
    """Decode `data` (already through `check_clip`'s limits) and analyse it. Blocking."""
    wav, rate = load_audio(data)
    return CheckedClip(wav, rate, analyse(wav, rate))


def parse_window(text: str | None, duration_s: float, param: str = WINDOW_PARAM) -> tuple[float, float] | str:
    """`text` as "auto", "full" (also empty / None) or "start,end" seconds -> that keyword or the pair."""
    value = (text or "").strip().lower()
    if value in ("", "full"):
        return "full"
    if value == "auto":
        return "auto"
    parts = value.replace(";", ",").split(",")
    try:
        start, end = (float(part) for part in parts)
    except ValueError:
        raise InvalidRequestError(f"{param} must be 'auto', 'full' or 'start,end' in seconds (e.g. '1.2,7.5'), "
                                  f"got {text[:40]!r}", param=param) from None
    if not (np.isfinite(start) and np.isfinite(end)) or start < 0 or end - start < MIN_CHOSEN_S:
        raise InvalidRequestError(f"{param} must run forwards from 0 s or later and hold at least "
                                  f"{MIN_CHOSEN_S:g} s, e.g. '1.2,7.5'", param=param)
    if start >= duration_s - MIN_CHOSEN_S / 2:
        raise InvalidRequestError(f"{param} starts at {start:g} s, but the clip is {duration_s:.2f} s long",
                                  param=param)
    return start, min(end, duration_s)


def windowed(clip: CheckedClip, window: tuple[float, float] | str) -> bytes | None:
    """The clip cut to `window` ("auto": the doctor's) as float WAV bytes; None for "full"."""
    if window == "full":
        return None
    if window == "auto":
        assert clip.analysis is not None, "an 'auto' window needs the clip's analysis"
        span = clip.analysis.window
    else:
        span = window
    piece = crop(clip.wav, clip.sample_rate, span)  # [C, m]
    out = io.BytesIO()
    sf.write(out, piece.T, clip.sample_rate, format="WAV", subtype="FLOAT")
    return out.getvalue()


def cut(data: bytes, window: tuple[float, float], param: str = WINDOW_PARAM) -> bytes:
    """The clip in `data` cut to `window` (seconds, checked against its length) as float WAV bytes."""
    wav, rate = load_audio(data)
    span = parse_window(f"{window[0]},{window[1]}", wav.shape[1] / rate, param)
    return windowed(CheckedClip(wav, rate, None), span)
