"""The clip doctor: how fit a reference clip is for cloning, and its best clean 3-10 s window.

Pure functions on a clip `[C, n]` float32 at any rate, analysed as 16 kHz mono in 32 ms frames
every 10 ms: level, non-speech (stationary power, flatness), speech runs, SNR, clipping, channel
balance, the window and the verdict. Nothing is refused here (the hard limits are in
`studio/limits/clip_decode.py`). The method and every threshold: docs/AUDITION.md ("The clip doctor").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import soxr

ANALYSIS_RATE_HZ = 16_000
HOP = 160  # 10 ms
FRAME = 512  # 32 ms
HOP_S = HOP / ANALYSIS_RATE_HZ
MIN_WINDOW_S, MAX_WINDOW_S = 3.0, 10.0
EDGE_PAD_S = 0.1
SOUNDING_RANGE_DB = 45.0
STEADY_SPAN_FRAMES = 25  # +-0.25 s
STEADY_SHARE = 0.5
TAINT_SHARE = 0.2
NOISE_FLATNESS = 0.5
MAX_SNR_DB = 60.0

# Verdict thresholds (documented in docs/AUDITION.md).
MIN_GOOD_SPEECH_S = 3.0
MIN_GOOD_SNR_DB = 20.0
MAX_GOOD_CLIPPED = 0.001
MAX_GOOD_NONSPEECH = 0.1
MAX_GOOD_IMBALANCE_DB = 6.0
MAX_GOOD_SILENCE_SHARE = 0.6


@dataclass(frozen=True, slots=True)
class ClipAnalysis:
    """What the clip doctor found; `window` is (start_s, end_s) in the clip's own time."""

    duration_s: float
    speech_seconds: float
    clipped_fraction: float
    snr_db: float
    nonspeech_fraction: float
    channel_imbalance_db: float
    window: tuple[float, float]
    problems: tuple[str, ...]

    @property
    def verdict(self) -> str:
        return "good" if not self.problems else "; ".join(self.problems)

    @property
    def is_good(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        """The API's `analysis` object (rounded for people; the window to the millisecond)."""
        return {
            "speech_seconds": round(self.speech_seconds, 2),
            "clipped_fraction": round(self.clipped_fraction, 5),
            "snr_db": round(self.snr_db, 1),
            "nonspeech_fraction": round(self.nonspeech_fraction, 3),
            "channel_imbalance_db": round(self.channel_imbalance_db, 1),
            "duration_s": round(self.duration_s, 3),
            "window": [round(self.window[0], 3), round(self.window[1], 3)],
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True)
class FrameFeatures:
    """Per-frame features of a clip at 16 kHz (one entry every `HOP_S`)."""

    energy_db: np.ndarray  # [F]
    sounding: np.ndarray  # [F] bool: within SOUNDING_RANGE_DB of the loudest frame (not silence)
    active: np.ndarray  # [F] bool: above the silence threshold
    steady: np.ndarray  # [F] bool: active and non-speech (tone, music, steady noise)
    tainted: np.ndarray  # [F] bool: speech with a steady sound under it (a fifth of its power or more)
    speech: np.ndarray  # [F] bool: speech after closing short gaps
    clipped: np.ndarray  # [F] bool: a clipped sample inside the frame's hop
    noise_db: float
    steady_energy: float  # the share of the sounding frames' energy that is stationary


def analyse(wav: np.ndarray, sample_rate: int) -> ClipAnalysis:
    """The clip doctor's report on `wav` ([C, n] or [n] float32 at `sample_rate`)."""
    wav = np.atleast_2d(np.asarray(wav, dtype=np.float32))
    duration_s = wav.shape[1] / sample_rate
    clipped_mask = clipped_samples(wav)  # [n]
    features = frame_features(wav, sample_rate, clipped_mask)
    speech_s = float(features.speech.sum()) * HOP_S
    nonspeech = features.steady_energy
    snr = snr_db(features)
    imbalance = channel_imbalance_db(wav)
    clipped_fraction = float(clipped_mask.mean())
    window = best_window(features, duration_s)
    silence_share = 1.0 - float(features.sounding.sum()) / max(1, len(features.sounding))
    problems = verdict_problems(speech_s, snr, clipped_fraction, nonspeech, imbalance, silence_share, duration_s)
    return ClipAnalysis(duration_s, speech_s, clipped_fraction, snr, nonspeech, imbalance, window, problems)


def clipped_samples(wav: np.ndarray) -> np.ndarray:
    """[n] bool: a sample of any channel at full scale, or in a flat run at a peak above 0.5."""
    magnitude = np.abs(wav).max(axis=0)  # [n]
    mask = magnitude >= 0.999
    peak = float(magnitude.max()) if magnitude.size else 0.0
    if 0.5 < peak < 0.999:
        at_peak = magnitude >= peak * 0.9999
        # runs of >= 3 samples at the peak: a limiter's flat top, not one loud sample
        run = at_peak[:-2] & at_peak[1:-1] & at_peak[2:]
        flat = np.zeros_like(at_peak)
        flat[:-2] |= run
        flat[1:-1] |= run
        flat[2:] |= run
        mask |= flat
    return mask


def channel_imbalance_db(wav: np.ndarray) -> float:
    if wav.shape[0] < 2:
        return 0.0
    rms = np.sqrt(np.mean(np.square(wav[:2], dtype=np.float64), axis=1)) + 1e-9
    return float(abs(20 * np.log10(rms[0] / rms[1])))


def frame_features(wav: np.ndarray, sample_rate: int, clipped_mask: np.ndarray) -> FrameFeatures:
    mono = wav.mean(axis=0)
    if sample_rate != ANALYSIS_RATE_HZ:
        mono = soxr.resample(mono, sample_rate, ANALYSIS_RATE_HZ, quality="HQ").astype(np.float32)
    num_frames = max(1, 1 + (len(mono) - FRAME) // HOP) if len(mono) >= FRAME else 1
    padded = np.pad(mono, (0, max(0, (num_frames - 1) * HOP + FRAME - len(mono))))
    index = np.arange(FRAME)[None, :] + HOP * np.arange(num_frames)[:, None]  # [F, FRAME]
    frames = padded[index] * np.hanning(FRAME).astype(np.float32)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # [F, FRAME/2+1]
    energy = power.sum(axis=1) / FRAME + 1e-12
    energy_db = 10 * np.log10(energy)
    noise_db = float(np.percentile(energy_db, 10))
    sounding = energy_db > float(energy_db.max()) - SOUNDING_RANGE_DB  # anything but silence
    active = sounding & (energy_db > noise_db + 8.0)  # clearly above the floor: speech or a loud sound

    bins = np.fft.rfftfreq(FRAME, 1 / ANALYSIS_RATE_HZ)
    band = (bins >= 100) & (bins <= 7000)
    band_power = power[:, band] + 1e-10
    log_spec = np.log(band_power)
    flatness = np.exp(log_spec.mean(axis=1)) / band_power.mean(axis=1)
    floor_power = stationary_power(power, STEADY_SPAN_FRAMES)  # [F]
    steady_share = floor_power / (power.sum(axis=1) + 1e-12)
    # A tone or hum that fills the pauses sets the floor itself: it is found among all sounding
    # frames. Flat (noise-like) spectra count only when clearly above the floor (hiss in pauses is
    # the SNR's business, not "non-speech").
    steady = sounding & ((steady_share > STEADY_SHARE) | (active & (flatness > NOISE_FLATNESS)))

    speech = _close_gaps(active & ~steady, max_gap=30, min_run=10)

    hop_native = HOP * sample_rate / ANALYSIS_RATE_HZ
    clipped_idx = np.flatnonzero(clipped_mask)
    clipped = np.zeros(num_frames, bool)
    if clipped_idx.size:
        clipped[np.minimum((clipped_idx / hop_native).astype(int), num_frames - 1)] = True
    steady_energy = float(floor_power[sounding].sum() / (power[sounding].sum() + 1e-12))
    tainted = sounding & (steady_share > TAINT_SHARE)
    return FrameFeatures(energy_db, sounding, active, steady, tainted, speech, clipped, noise_db, steady_energy)


def stationary_power(power: np.ndarray, span: int) -> np.ndarray:
    """[F]: the part of each frame's power that every frame within +-`span` also has, bin by bin:
    what stays put (a tone, a held chord, hum), whereas speech moves its harmonics and formants.
    Random noise's minimum is low too: noise is found by flatness and the SNR instead."""
    # averaged over 90 ms first: speech sharing a tone's bins beats with it (phases cancel for a
    # frame), which would pull a plain minimum far below the tone's power
    kernel = np.ones(9, np.float32) / 9
    smooth = np.apply_along_axis(lambda column: np.convolve(column, kernel, mode="same"), 0, power)
    padded = np.pad(np.minimum(smooth, power * 4), ((span, span), (0, 0)), constant_values=np.inf)
    floor = np.lib.stride_tricks.sliding_window_view(padded, 2 * span + 1, axis=0).min(axis=-1)  # [F, bins]
    return floor.sum(axis=1)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _close_gaps(mask: np.ndarray, *, max_gap: int, min_run: int) -> np.ndarray:
    out = mask.copy()
    runs = _runs(mask)
    for (_, end), (start, _) in itertools.pairwise(runs):
        if start - end < max_gap:
            out[end:start] = True
    for start, end in _runs(out):
        if end - start < min_run:
            out[start:end] = False
    return out


def snr_db(features: FrameFeatures) -> float:
    power = 10 ** (features.energy_db / 10)
    quiet = power[features.energy_db <= np.percentile(features.energy_db, 10)]
    noise = float(quiet.mean()) if quiet.size else 1e-12
    loud = power[features.speech] if features.speech.any() else power[features.active]
    if not loud.size or noise <= 1e-11:
        return MAX_SNR_DB
    signal = max(float(loud.mean()) - noise, 1e-12)
    return float(np.clip(10 * np.log10(signal / noise), -MAX_SNR_DB, MAX_SNR_DB))


def best_window(features: FrameFeatures, duration_s: float) -> tuple[float, float]:
    """The best clean 3-10 s stretch, in seconds of the clip, edges at speech runs' edges."""
    speech = features.speech
    bad = features.clipped | features.steady | features.tainted
    runs = _runs(speech)
    if not runs:
        return 0.0, min(duration_s, MAX_WINDOW_S)
    run_pieces = []
    max_frames = int(MAX_WINDOW_S / HOP_S)
    for start, end in runs:  # a run longer than 10 s is cut at quiet frames near each 10 s mark
        while end - start > max_frames:
            lo = start + max_frames - int(MIN_WINDOW_S / HOP_S)
            cut = lo + int(np.argmin(features.energy_db[lo:start + max_frames]))
            run_pieces.append((start, cut))
            start = cut
        run_pieces.append((start, end))
    good = np.concatenate([[0], np.cumsum(speech & ~bad)])
    worse = np.concatenate([[0], np.cumsum(bad & features.sounding)])
    pad = int(EDGE_PAD_S / HOP_S)
    best: tuple[float, int, int, int] | None = None
    for i, (start, _) in enumerate(run_pieces):
        for end in (e for _, e in run_pieces[i:]):
            seconds = (end - start + 2 * pad) * HOP_S
            if seconds > MAX_WINDOW_S + 2 * EDGE_PAD_S:
                break
            if seconds < MIN_WINDOW_S:
                continue
            score = (good[end] - good[start] - 3 * (worse[end] - worse[start])) * HOP_S + 0.01 * seconds
            if best is None or score > best[0] + 1e-9:
                best = (score, start, end, i)
    if best is None:  # under 3 s of speech in every span: all of it, from first to last word
        start, end = run_pieces[0][0], run_pieces[-1][1]
    else:
        _, start, end, _ = best
    start_s = max(0.0, (start - pad) * HOP_S)
    end_s = min(duration_s, (end + pad) * HOP_S)
    return start_s, end_s


def verdict_problems(speech_s: float, snr: float, clipped: float, nonspeech: float, imbalance: float,
                     silence_share: float, duration_s: float) -> tuple[str, ...]:
    """What to fix, most important first; empty when the clip is good."""
    problems = []
    if nonspeech > MAX_GOOD_NONSPEECH:
        problems.append(f"music or steady noise in {nonspeech:.0%} of the sound: use a clip of speech alone")
    if snr < MIN_GOOD_SNR_DB:
        problems.append(f"noisy (SNR about {snr:.0f} dB): record in a quieter place, closer to the microphone")
    if clipped > MAX_GOOD_CLIPPED:
        problems.append(f"clipped ({clipped:.1%} of samples at full scale): record a little quieter")
    if speech_s < MIN_GOOD_SPEECH_S:
        problems.append(f"only {speech_s:.1f} s of speech: 3-10 s clones best")
    if imbalance > MAX_GOOD_IMBALANCE_DB:
        problems.append(f"channels {imbalance:.0f} dB apart: use the better channel or a mono recording")
    if silence_share > MAX_GOOD_SILENCE_SHARE and duration_s > MIN_WINDOW_S:
        problems.append(f"mostly silence ({silence_share:.0%}): the chosen window skips it")
    return tuple(problems)


def crop(wav: np.ndarray, sample_rate: int, window: tuple[float, float]) -> np.ndarray:
    """`wav` [C, n] between `window` seconds (clamped to the clip; at least one sample)."""
    start = round(max(0.0, window[0]) * sample_rate)
    end = round(min(wav.shape[-1] / sample_rate, window[1]) * sample_rate)
    start = min(start, wav.shape[-1] - 1)
    return wav[..., start:max(end, start + 1)]
