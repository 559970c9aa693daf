"""How close a time-stretched signal is to a reference stretch, near given join points (pure numpy).

Used by `bench/http/speech_api.py` (the figures) and `tests/unit/test_stretch.py` (the bounds): both
compare our block-wise stretch against Rubber Band stretching the whole clip at once.
"""

from __future__ import annotations

import numpy as np


def mel_band_db(pcm: np.ndarray, rate: int, n: int = 2048, hop: int = 480) -> np.ndarray:
    """Levels (dB, floored 80 dB under the peak) of 40 mel bands, 50 Hz-16 kHz, per `hop`-sample
    frame of channel 0 of pcm [C, S] -> [frames, 40]."""
    frames = np.lib.stride_tricks.sliding_window_view(pcm[0], n)[::hop] * np.hanning(n)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    freqs = np.fft.rfftfreq(n, 1 / rate)
    mel = np.linspace(2595 * np.log10(1 + 50 / 700), 2595 * np.log10(1 + 16_000 / 700), 42)
    hz = 700 * (10 ** (mel / 2595) - 1)
    bands = np.stack([power[:, (freqs >= hz[i]) & (freqs < hz[i + 2])].sum(1) for i in range(40)], 1)
    level = 10 * np.log10(bands + 1e-10)
    return np.maximum(level, level.max() - 80)


def join_distances(ours: np.ndarray, whole: np.ndarray, joins: list[int],
                   rate: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame mel-band distance (dB RMS over the bands) of `ours` to `whole`, split into frames
    within 1024 samples of a join and the others; frames under 40 dB below the loudest are left out."""
    m = min(ours.shape[1], whole.shape[1])
    a, b = mel_band_db(ours[:, :m], rate), mel_band_db(whole[:, :m], rate)
    distance = np.sqrt(np.mean((a - b) ** 2, axis=1))
    active = b.max(1) > b.max() - 40
    centers = np.arange(len(distance)) * 480 + 1024
    near = np.zeros(len(distance), bool)
    for join in joins:
        near |= np.abs(centers - join) < 1024
    return distance[near & active], distance[~near & active]


def low_band_dips(pcm: np.ndarray, joins: list[int], rate: int, width: int = 480) -> np.ndarray:
    """Per join: the 60-400 Hz level (the voice's fundamental) in the `width` samples around it, in
    dB relative to windows 2 widths either side. Two renders crossfaded out of phase dip here."""
    spectrum = np.fft.rfft(pcm[0])
    freqs = np.fft.rfftfreq(pcm.shape[1], 1 / rate)
    spectrum[(freqs < 60) | (freqs > 400)] = 0
    low = np.fft.irfft(spectrum, pcm.shape[1])
    out = []
    for j in joins:
        if j - 3 * width < 0 or j + 3 * width > len(low):
            continue
        middle = np.sqrt(np.mean(low[j - width // 2 : j + width // 2] ** 2))
        sides = np.r_[low[j - 5 * width // 2 : j - 3 * width // 2], low[j + 3 * width // 2 : j + 5 * width // 2]]
        side = np.sqrt(np.mean(sides**2))
        if side > 1e-3:
            out.append(20 * np.log10(middle / side + 1e-9))
    return np.array(out)
