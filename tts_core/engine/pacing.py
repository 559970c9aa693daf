"""How many frames to decode per audio chunk: small while the listener is close to starving,
larger once the stream is comfortably ahead of real time (docs/spec/LM.md §6 budget, tuned for a player
that prebuffers). Pure functions.
"""

from __future__ import annotations

FRAME_S = 0.08  # one codec frame


def frame_budget(lead_s: float | None) -> int:
    """Frames to gather before the next codec decode, given how far audio is ahead of playback;
    `lead_s` is None before the first chunk, which is then one frame, so first audio is early."""
    if lead_s is None or lead_s < 0.20:
        return 1
    if lead_s < 0.55:
        return 2
    if lead_s < 1.10:
        return 4
    return 8


def decode_count(pending: int, lead_s: float | None, step: int) -> int:
    """Frames of a stream to decode at engine step `step` (0: not at this step): every frame it
    holds, on the steps that are multiples of its budget (`frame_budget`, a power of two), so streams
    started at different steps share one batched decode (docs/PERFORMANCE.md, "Arrivals spread out")."""
    if pending <= 0 or step % frame_budget(lead_s):
        return 0
    return pending


def playback_lead_s(emitted_audio_s: float, first_audio_at: float | None, now: float) -> float | None:
    """Seconds of audio already handed out beyond what a real-time listener has played."""
    if first_audio_at is None:
        return None
    return emitted_audio_s - (now - first_audio_at)
