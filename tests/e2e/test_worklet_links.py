"""The worklet's start and rebuffer plans when the link, not the generator, sets the pace
(static/player/buffering.js `linkRate`, `recentRate`), driven quantum by quantum: deterministic, no network."""

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


def test_a_known_link_rate_plans_the_start_for_a_burst_then_a_slow_link(js):
    """float32 over ~230 kB/s carries 0.6 audio seconds per second, but the first two seconds of
    audio came at 8x real time (drained from the server's and the kernel's socket buffers over
    several reads). Told the link's rate (measured on the last utterance), the worklet waits long
    enough at the start and plays all of it without a gap; measuring alone, it starts too early."""
    chunks = [2] * 52  # 8.3 s
    schedule = delivery_schedule(chunks, [(2.0, 8.0), (1e9, 0.6)])
    total_s = sum(chunks) * 0.08
    planned = run_paced(js, schedule, estimated_s=total_s, link_rate=0.6)
    s = planned["s"]
    assert s["framesReceived"] == s["framesRendered"] == sum(chunks) * FRAME
    assert s["underruns"] == 0 and planned["mismatches"] == 0, (s["underrunsAt"], s["startBufferedFrames"])
    # The start waited for what the link allows: about (1.15 / 0.6 - 1) x what was still to come.
    assert s["startBufferedFrames"] / 48_000 >= 0.8 * total_s * (1 - 0.6 / 1.15)
    unplanned = run_paced(js, schedule, estimated_s=total_s)["s"]  # the same stream, no link rate
    assert unplanned["startBufferedFrames"] < s["startBufferedFrames"] and unplanned["underruns"] >= 1


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
