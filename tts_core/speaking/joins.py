"""Joins between the pieces of one utterance: each piece's audio fades in over its first few
milliseconds and out over its last, so consecutive pieces (separate streams, each starting its codec
afresh) meet at silence and never step.

`PieceEdges` holds back the last `RAMP_SAMPLES` of what it was given, since only the end of a piece
tells which samples were its last. Invariant: every sample pushed comes out once, in order, scaled
by 1 except within `RAMP_SAMPLES` of a piece's start or end (raised-cosine ramps).
"""

from __future__ import annotations

import numpy as np

from ..types import NUM_CHANNELS

RAMP_SAMPLES = 240  # 5 ms at 48 kHz: below what is heard as a fade, well above a click


def _ramp(length: int) -> np.ndarray:
    """Rising raised-cosine, [length] float32, from just above 0 to just below 1."""
    t = (np.arange(length, dtype=np.float64) + 0.5) / length
    return (0.5 - 0.5 * np.cos(np.pi * t)).astype(np.float32)


_RISE = _ramp(RAMP_SAMPLES)
_FALL = _RISE[::-1].copy()


class PieceEdges:
    """Fades at piece edges over a stream of [2, n] float32 blocks (see the module docstring)."""

    def __init__(self) -> None:
        self._held = np.zeros((NUM_CHANNELS, 0), np.float32)
        self._into_piece = RAMP_SAMPLES  # samples of the current piece already out (>= RAMP: no fade-in left)

    def start(self) -> None:
        """A new piece begins: its first samples fade in."""
        self._into_piece = 0

    def push(self, pcm: np.ndarray) -> np.ndarray:
        """What can go out now of the audio so far (the newest RAMP_SAMPLES are held back)."""
        if not pcm.shape[1]:
            return pcm
        joined = np.concatenate([self._held, pcm], axis=1) if self._held.shape[1] else pcm
        keep = max(0, joined.shape[1] - RAMP_SAMPLES)
        out, self._held = joined[:, :keep], joined[:, keep:]
        return self._fade_in(out)

    def end(self) -> np.ndarray:
        """The piece ends: its held tail, faded out."""
        tail, self._held = self._held, np.zeros((NUM_CHANNELS, 0), np.float32)
        tail = self._fade_in(tail)
        if tail.shape[1]:
            tail = tail * _FALL[RAMP_SAMPLES - tail.shape[1]:]
        return tail

    def _fade_in(self, out: np.ndarray) -> np.ndarray:
        left = RAMP_SAMPLES - self._into_piece
        if left > 0 and out.shape[1]:
            n = min(left, out.shape[1])
            out = out.copy()
            out[:, :n] *= _RISE[self._into_piece : self._into_piece + n]
        self._into_piece += out.shape[1]
        return out
