"""The player's stream (POST /api/tts/stream, docs/PROTOCOL.md §2.3) read as the player reads it:
the event frames split, 16-bit PCM scaled as static/player/transport.js scales it, Ogg/Opus decoded
by FFmpeg (PyAV). Shared by the player bench and the tests of the route; a malformed body is an
`AssertionError` naming the byte where it breaks.
"""

from __future__ import annotations

import io
import json
import struct

import av
import numpy as np


def parse_frames(body: bytes) -> list[tuple[int, bytes | dict]]:
    """The player's event framing: [u32 LE length][u8 kind][payload]; kind 1 payloads parsed as JSON."""
    frames, at = [], 0
    while at < len(body):
        assert at + 5 <= len(body), f"truncated frame header at byte {at}"
        length, kind = struct.unpack_from("<IB", body, at)
        payload = body[at + 5 : at + 5 + length]
        assert len(payload) == length, f"truncated frame at byte {at}"
        frames.append((kind, json.loads(payload) if kind == 1 else payload))
        at += 5 + length
    return frames


def decode_ogg_opus(data: bytes) -> np.ndarray:
    """PyAV's (FFmpeg's) Ogg demuxer and Opus decoder: float32 [2, n], pre-skip and end trim applied."""
    with av.open(io.BytesIO(data), format="ogg") as container:
        frames = [frame.to_ndarray() for frame in container.decode(audio=0)]
    pcm = np.concatenate(frames, axis=1)
    return pcm if pcm.shape[0] == 2 else pcm.reshape(2, -1)


def player_stream(body: bytes, sample_format: str) -> tuple[np.ndarray, list[dict]]:
    """The player's stream -> (float32 [2, n], its events): `sample_format` is the response's
    X-Sample-Format (s16le or opus). Opus is decoded by FFmpeg; the browser's own decoder agrees
    within 2e-3 per sample (tests/e2e/test_player_opus.py)."""
    frames = parse_frames(body)
    assert {kind for kind, _ in frames} <= {0, 1}, {kind for kind, _ in frames}
    audio = b"".join(payload for kind, payload in frames if kind == 0)
    events = [payload for kind, payload in frames if kind == 1]
    if sample_format == "s16le":
        return np.frombuffer(audio, "<i2").reshape(-1, 2).T.astype(np.float32) / 32767, events
    assert sample_format == "opus", sample_format
    return decode_ogg_opus(audio), events
