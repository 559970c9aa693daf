"""G.711 companding (ITU-T G.711): 16-bit samples to 8-bit mu-law or A-law, as telephony carries
them (8 kHz phone lines; Cartesia's `pcm_mulaw` / `pcm_alaw`, Deepgram's `mulaw` / `alaw`).

Pure numpy; the same bytes as the reference encoder (Python's former `audioop.lin2ulaw` /
`lin2alaw`) for every 16-bit input.
"""

from __future__ import annotations

import numpy as np

# Segment ends of the 14-bit (mu-law) and 13-bit (A-law) magnitudes: a value's segment is the
# first whose end is >= it (8: beyond the last, clipped).
_MU_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
_A_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
_MU_CLIP = 8159
_MU_BIAS = 0x84 >> 2


def mulaw_bytes(samples: np.ndarray) -> bytes:
    """int16 samples (any shape, in order) -> one mu-law byte each."""
    x = samples.astype(np.int32).ravel() >> 2  # 14-bit
    mask = np.where(x < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(x), _MU_CLIP) + _MU_BIAS
    segment = np.searchsorted(_MU_ENDS, magnitude, side="left")
    value = np.where(segment >= 8, 0x7F, (segment << 4) | ((magnitude >> (np.minimum(segment, 7) + 1)) & 0x0F))
    return ((value ^ mask) & 0xFF).astype(np.uint8).tobytes()


def alaw_bytes(samples: np.ndarray) -> bytes:
    """int16 samples (any shape, in order) -> one A-law byte each."""
    x = samples.astype(np.int32).ravel() >> 3  # 13-bit
    mask = np.where(x >= 0, 0xD5, 0x55)
    magnitude = np.where(x >= 0, x, -x - 1)
    segment = np.searchsorted(_A_ENDS, magnitude, side="left")
    low = np.where(segment < 2, magnitude >> 1, magnitude >> np.clip(segment, 2, 7)) & 0x0F
    value = np.where(segment >= 8, 0x7F, (segment << 4) | low)
    return ((value ^ mask) & 0xFF).astype(np.uint8).tobytes()
