"""The worklet's adaptive start (static/player/buffering.js), driven quantum by quantum: with the server's
estimate of the total length a stream slower than real time waits, says how long, and then plays
through with at most one rebuffer; a fast one keeps the short start. Time is the count of quanta."""

from __future__ import annotations

import itertools
import math

import pytest
from support.worklet_harness import FRAME, QUANTUM_MS, paced_schedule, run_paced

pytestmark = pytest.mark.e2e


@pytest.fixture
def js(static_page):
    return static_page


# ---- the adaptive start: an estimate of the total length lets a slow stream play through -------------

ENGINE_CHUNKS = [1, 1, 1, 1, 2, 2, 2, 4, 4, 4] + [8] * 30  # frames per chunk, as the engine streams them


def engine_chunks(total_frames: int) -> list[int]:
    out, left = [], total_frames
    for n in ENGINE_CHUNKS:
        if left <= 0:
            break
        out.append(min(n, left))
        left -= out[-1]
    return out


ADAPTIVE_CASES = {
    # name: (frames per chunk, RTF, ms to the first chunk, estimate / true length, most underruns)
    "RTF 1.5, 6 s, exact estimate": (engine_chunks(75), 1.5, 300, 1.0, 0),
    "RTF 1.5, 6 s, one frame per chunk": ([1] * 75, 1.5, 300, 1.0, 0),
    "RTF 1.5, 10 s, estimate 30 % short": (engine_chunks(125), 1.5, 300, 0.7, 1),
    "RTF 1.5, 6 s, estimate 20 % long": (engine_chunks(75), 1.5, 300, 1.2, 0),
    "RTF 2.5, 4 s, exact estimate": (engine_chunks(50), 2.5, 300, 1.0, 0),
    "RTF 1.05, 8 s, exact estimate": (engine_chunks(100), 1.05, 300, 1.0, 0),
    "RTF 0.9, 8 s, exact estimate": (engine_chunks(100), 0.9, 200, 1.0, 0),
}


@pytest.mark.parametrize("case", ADAPTIVE_CASES)
def test_adaptive_start_plays_a_slow_stream_through_with_at_most_one_rebuffer(js, case):
    chunks, rtf, first_ms, estimate_ratio, most_underruns = ADAPTIVE_CASES[case]
    total_s = sum(chunks) * 0.08
    result = run_paced(js, paced_schedule(chunks, rtf, first_ms), estimated_s=total_s * estimate_ratio)
    s = result["s"]
    assert s["framesReceived"] == s["framesRendered"] == result["total"] == sum(chunks) * FRAME  # all audio played
    assert s["underruns"] <= most_underruns, (s["underruns"], s["underrunsAt"], s["startBufferedFrames"])
    if s["underruns"] == 0:
        assert result["mismatches"] == 0  # no gap: the source sample for sample
    # It waited, and said how long: once the rate was measured, the expected wait was about right.
    start_s = result["lead"] / 2 / 48_000
    waits = [(t, wait) for t, state, wait in result["plans"] if state == "prebuffering" and wait is not None]
    if rtf > 1:
        assert s["startBufferedFrames"] > 0.2 * 48_000  # more than the short start
        assert waits, result["plans"]
        t, wait = next((t, w) for t, w in waits if t >= first_ms / 1000 + 0.5)  # half a second of measuring
        assert abs(t + wait - start_s) < 0.25 * start_s + 0.3, (t, wait, start_s)


def test_a_late_bunch_of_first_chunks_does_not_make_a_slow_stream_look_fast(js):
    """The headers came on time, but a busy page delivered the first three chunks 250 ms late, at once:
    measured from the stream's start, the rate stays slow and the plan holds (no underrun)."""
    chunks = engine_chunks(75)
    schedule = paced_schedule(chunks, 1.5, 300)
    late = schedule[2][0] + math.ceil(250 / QUANTUM_MS)
    bunched = [[late, frames] for _, frames in schedule[:3]] + schedule[3:]
    result = run_paced(js, bunched, estimated_s=sum(chunks) * 0.08, start_quantum=schedule[0][0])
    s = result["s"]
    assert s["underruns"] == 0, (s["underrunsAt"], s["startBufferedFrames"])
    assert s["framesRendered"] == result["total"] and s["startBufferedFrames"] > 2 * 48_000


@pytest.mark.parametrize("late_ms", [60, 150, 400])
def test_a_late_first_read_does_not_make_a_fast_stream_look_slow(js, late_ms):
    """The headers came, then a busy page read the first audio late, then the rest came fast: the rate
    is measured from the first lump's arrival less its own length, so the short start is kept exactly."""
    chunks = engine_chunks(40)
    schedule = paced_schedule(chunks, 0.3, 500)
    start_q = schedule[0][0] - math.ceil(late_ms / QUANTUM_MS)
    assert start_q >= 0
    late = run_paced(js, schedule, estimated_s=sum(chunks) * 0.08, start_quantum=start_q)
    on_time = run_paced(js, schedule, estimated_s=sum(chunks) * 0.08)
    assert late["s"]["underruns"] == on_time["s"]["underruns"] == 0
    assert late["lead"] == on_time["lead"] and late["s"]["startBufferedFrames"] <= 0.25 * 48_000


def test_without_an_estimate_a_slow_stream_chops(js):
    """The reason for the plan: the same RTF 1.5 stream with the fixed short start runs dry again and again."""
    result = run_paced(js, paced_schedule(engine_chunks(75), 1.5, 300), estimated_s=None)
    assert result["s"]["underruns"] >= 3
    assert result["s"]["framesRendered"] == result["total"]


@pytest.mark.parametrize("rtf", [0.1, 0.3, 0.6])
def test_fast_generation_keeps_the_short_start(js, rtf):
    """With an estimate and fast generation, playback starts as soon as 0.2 s is buffered, as before."""
    chunks = engine_chunks(40)
    schedule = paced_schedule(chunks, rtf, 150)
    planned = run_paced(js, schedule, estimated_s=sum(chunks) * 0.08)
    fixed = run_paced(js, schedule, estimated_s=None)
    assert planned["s"]["underruns"] == fixed["s"]["underruns"] == 0
    # Starts with the fixed start, or at most one arrival later (the rate needs two arrivals to measure).
    gap_quanta = max(b[0] - a[0] for a, b in itertools.pairwise(schedule[:5]))
    assert fixed["lead"] <= planned["lead"] <= fixed["lead"] + 2 * 128 * (gap_quanta + 1)
    assert planned["s"]["startBufferedFrames"] < 0.5 * 48_000


PLAN = """
async (cases) => {
  const { planStart } = await import('/player/buffering.js');
  return cases.map((c) => planStart(c));
}
"""


def test_plan_is_a_pure_function_of_what_arrived(js):
    base = {"now": 2.0, "firstArrival": 0.0, "lastArrival": 2.0, "arrivals": 11, "firstChunkS": 0.08,
            "receivedS": 1.08, "bufferedS": 1.08, "estimatedS": 6.0, "largestChunkS": 0.32, "ended": False,
            "rebuffering": False, "shortStartS": 0.2}
    cases = [
        base,                                                     # rate 0.5: needs 4.92 × (1.3) + lump
        {**base, "bufferedS": 5.0, "receivedS": 5.0, "now": 9.84, "lastArrival": 9.84},   # enough now
        {**base, "estimatedS": None},                             # nothing to plan with: the short start
        {**base, "ended": True},                                  # everything is here
        {**base, "now": 0.3, "lastArrival": 0.3, "receivedS": 2.08, "bufferedS": 2.08},   # fast: 6.7 × real time
        {**base, "arrivals": 1, "receivedS": 0.08, "bufferedS": 0.08},                      # one arrival
        {**base, "rebuffering": True, "receivedS": 7.0, "bufferedS": 0.0, "now": 14, "lastArrival": 14},
    ]
    slow, enough, unplanned, ended, fast, single, rebuffer = js.evaluate(PLAN, cases)
    assert slow["rate"] == pytest.approx(0.5)
    k = 1.15 / 0.5 - 1
    assert slow["targetS"] == pytest.approx(k * (6.0 - 1.08) + 0.32) and not slow["start"]
    assert slow["waitS"] == pytest.approx((slow["targetS"] - 1.08) / (0.5 * (1 + k)))
    assert enough["start"]
    assert unplanned["start"] and unplanned["targetS"] == 0.2
    assert ended["start"] and ended["waitS"] == 0
    assert fast["start"] and fast["targetS"] == 0.2
    assert not single["start"] and single["rate"] is None
    # Past its estimate: half of what already played is assumed still to come, with twice the lump.
    rate = (7.0 - 0.08) / 14
    assert rebuffer["rate"] == pytest.approx(rate)
    assert not rebuffer["start"] and rebuffer["targetS"] == pytest.approx((1.15 / rate - 1) * 3.5 + 0.64)
