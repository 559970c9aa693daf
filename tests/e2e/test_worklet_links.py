"""The worklet's rebuffer plan when the link, not the generator, slows down mid-way
(static/player/buffering.js `recentRate`), driven quantum by quantum: deterministic, no network."""

from __future__ import annotations

import math

import pytest
from support.worklet_harness import FRAME, QUANTUM_MS, run_paced

pytestmark = pytest.mark.e2e


@pytest.fixture
def js(static_page):
    return static_page


def delivery_schedule(chunk_frames: list[int], paces: list[tuple[float, float]], first_ms: float = 150,
                      burst_s: float = 0.0) -> list[list[int]]:
    """Chunks delivered at a pace that changes with the audio delivered so far: `paces` is
    [(until audio second, audio seconds per second)]; the first `burst_s` of audio arrive at once
    (what a socket's buffers hold before the link's pace shows)."""
    schedule, t_ms, audio_s = [], first_ms, 0.0
    for frames in chunk_frames:
        seconds = frames * 0.08
        if audio_s >= burst_s:
            pace = next((p for until, p in paces if audio_s < until), paces[-1][1])
            t_ms += 1000 * seconds / pace
        audio_s += seconds
        schedule.append([math.ceil(t_ms / QUANTUM_MS), frames * FRAME])
    return schedule


@pytest.mark.parametrize("slow_pace", [0.7, 0.5])
def test_a_link_that_slows_mid_way_costs_at_most_one_rebuffer(js, slow_pace):
    """Delivered at 1.6x real time for the first 3 s of audio, then at `slow_pace` to the end
    (12 s): the start is short (the link looked fast), the slowdown drains the buffer once, and the
    rebuffer is planned at the new pace, so there is no second one."""
    chunks = [2] * 75  # 12 s
    schedule = delivery_schedule(chunks, [(3.0, 1.6), (1e9, slow_pace)])
    result = run_paced(js, schedule, estimated_s=sum(chunks) * 0.08)
    s = result["s"]
    assert s["framesReceived"] == s["framesRendered"] == sum(chunks) * FRAME  # all audio played
    assert s["underruns"] <= 1, (s["underruns"], s["underrunsAt"], s["underrunFrames"])
