"""What a listener hears from a streamed response: how much audio had arrived when, and a playback
simulation over it (pure functions, no clock: the arrival times are given).

`audio_timeline` turns the bytes of one response and the times its pieces arrived into (time, audio
seconds playable) points: for raw pcm / wav by counting samples, for the compressed formats by
demuxing the finished byte stream once (PyAV) and placing each packet's audio at the moment its last
byte arrived. `simulate_playback` is a listener who starts playing at the first audio and plays in
real time: each time the playhead reaches the end of what has arrived before the stream is over, the
player underruns and stays silent until more audio comes.
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Sequence
from dataclasses import dataclass

# bytes per second of 16-bit audio at 48 kHz stereo, the formats counted without decoding
_S16_RATE_CHANNELS = {"pcm": 2, "wav": 2}
_WAV_HEADER_BYTES = 44


@dataclass(frozen=True, slots=True)
class Playback:
    """A simulated listener: when they could start, how often and how long they heard silence."""

    start_s: float | None  # first playable audio (None: nothing playable arrived)
    underruns: int
    silence_s: float
    audio_s: float  # playable audio in the response


def simulate_playback(points: Sequence[tuple[float, float]], *, gap_s: float = 1e-3) -> Playback:
    """`points`: (arrival time, audio seconds playable by then), times and amounts non-decreasing.

    The listener starts at the first point with audio and plays at real time; when the playhead
    catches up with the audio that has arrived, that is an underrun, and the silence lasts until
    the next point brings more. Stalls shorter than `gap_s` (rounding) are not counted.
    """
    playable = [(t, a) for t, a in points if a > 0]
    if not playable:
        return Playback(None, 0, 0.0, 0.0)
    start, _ = playable[0]
    clock, played, underruns, silence = start, 0.0, 0, 0.0  # the playhead reaches `played` at `clock`
    for t, available in playable:
        if available <= played:
            continue
        if t > clock + gap_s:  # the player ran dry at `clock`; this audio resumes it
            underruns += 1
            silence += t - clock
            clock = t
        clock = max(clock, t) + (available - played)
        played = available
    return Playback(start, underruns, round(silence, 6), played)


def _s16_points(fmt: str, arrivals: Sequence[tuple[float, int]], sample_rate: int, channels: int
                ) -> list[tuple[float, float]]:
    header = _WAV_HEADER_BYTES if fmt == "wav" else 0
    per_second = sample_rate * channels * 2
    return [(t, max(0, total - header) / per_second) for t, total in arrivals]


def _packet_ends(data: bytes) -> list[tuple[int, float]]:
    """(byte offset where the packet ends, audio seconds up to its end) for every packet of `data`."""
    import av

    ends: list[tuple[int, float]] = []
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.audio[0]
        seconds = 0.0
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            duration = packet.duration or 0
            seconds += float(duration * packet.time_base) if packet.time_base else 0.0
            position = packet.pos if packet.pos is not None and packet.pos >= 0 else None
            ends.append((len(data) if position is None else position + packet.size, seconds))
    return ends


def audio_timeline(fmt: str, data: bytes, arrivals: Sequence[tuple[float, int]], *, sample_rate: int = 48_000,
                   channels: int = 2) -> list[tuple[float, float]]:
    """(arrival time, audio seconds playable by then) of one response.

    `arrivals`: (time, bytes received in total by then), one per piece read from the socket.
    """
    if fmt in _S16_RATE_CHANNELS:
        return _s16_points(fmt, arrivals, sample_rate, channels)
    ends = _packet_ends(data)
    offsets = [end for end, _ in ends]
    points = []
    for t, total in arrivals:
        complete = bisect.bisect_right(offsets, total)  # packets whose last byte has arrived
        points.append((t, ends[complete - 1][1] if complete else 0.0))
    return points
