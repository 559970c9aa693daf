"""Scheduler (pure Python) and pacing: admission, retirement, slot reuse, fairness, queue limit."""

from __future__ import annotations

import pytest

from studio.errors import http_status
from tts_core.engine.pacing import decode_count, frame_budget, playback_lead_s
from tts_core.engine.scheduler import Scheduler
from tts_core.errors import QueueFullError
from tts_core.segments import default_max_frames


def test_admits_fifo_into_lowest_free_slots() -> None:
    sched = Scheduler(num_slots=2, max_queue=4)
    for name in "abcd":
        sched.add(name)
    assert sched.schedule() == [("a", 0), ("b", 1)]
    assert sched.num_waiting == 2 and sched.num_running == 2
    assert sched.schedule() == []  # nothing free


def test_finished_slot_is_reused_by_the_oldest_waiter() -> None:
    sched = Scheduler(num_slots=2, max_queue=4)
    for name in "abcd":
        sched.add(name)
    sched.schedule()
    assert sched.finish("a") == 0
    assert sched.schedule() == [("c", 0)]
    assert sched.finish("b", cancelled=True) == 1
    assert sched.schedule() == [("d", 1)]
    assert sched.stats.finished == 1 and sched.stats.cancelled == 1


def test_queue_limit_refuses_with_queue_full() -> None:
    sched = Scheduler(num_slots=1, max_queue=1)
    sched.add("a")
    sched.schedule()
    sched.add("b")
    with pytest.raises(QueueFullError) as info:
        sched.add("c")
    assert http_status(info.value) == (503, "server_busy") and info.value.retry_after_s > 0
    assert sched.stats.refused == 1
    # Once a slot frees, the queue drains and new work is accepted again.
    sched.finish("a")
    assert sched.schedule() == [("b", 0)]
    sched.add("c")


def test_zero_queue_still_accepts_while_slots_are_free() -> None:
    sched = Scheduler(num_slots=2, max_queue=0)
    sched.add("a")
    sched.add("b")
    with pytest.raises(QueueFullError):
        sched.add("c")


def test_cancel_while_waiting_removes_from_queue() -> None:
    sched = Scheduler(num_slots=1, max_queue=2)
    sched.add("a")
    sched.add("b")
    sched.schedule()
    assert sched.finish("b", cancelled=True) is None
    assert sched.num_waiting == 0
    assert sched.finish("unknown") is None


def test_duplicate_submit_is_a_bug() -> None:
    sched = Scheduler(num_slots=1, max_queue=2)
    sched.add("a")
    with pytest.raises(ValueError):
        sched.add("a")


def test_fairness_under_churn() -> None:
    """Every submitted stream is admitted exactly once, in submission order."""
    sched = Scheduler(num_slots=3, max_queue=100)
    order = [f"s{i}" for i in range(20)]
    for name in order:
        sched.add(name)
    admitted: list[str] = []
    running: list[str] = []  # admission order
    while len(admitted) < len(order):
        batch = [name for name, _ in sched.schedule()]
        admitted.extend(batch)
        running.extend(batch)
        for name in batch[:1]:
            assert sched.finish(name) is not None
            running.remove(name)
        for name in running[:2]:
            assert sched.finish(name) is not None
        del running[:2]
    assert admitted == order
    assert sched.num_running == len(running)


def test_frame_budget_grows_with_lead() -> None:
    assert frame_budget(None) == 1
    assert frame_budget(-0.5) == 1
    assert frame_budget(0.3) == 2
    assert frame_budget(0.8) == 4
    assert frame_budget(5.0) == 8
    assert playback_lead_s(1.0, None, 10.0) is None
    assert playback_lead_s(1.0, 9.5, 10.0) == pytest.approx(0.5)


def test_default_max_frames_is_proportional_and_capped() -> None:
    assert default_max_frames(1) < default_max_frames(10) < default_max_frames(40)
    assert default_max_frames(10_000) == 375


def test_decode_count_aligns_streams_on_their_budget() -> None:
    """A stream decodes on the steps that are multiples of its budget, taking all it holds: two
    streams that started three steps apart decode together from their first aligned step on."""
    ahead = 5.0  # budget 8
    assert decode_count(0, ahead, 16) == 0
    assert decode_count(3, ahead, 13) == 0
    assert decode_count(3, ahead, 16) == 3  # the younger stream joins the older one's phase
    assert decode_count(8, ahead, 24) == 8
    assert decode_count(11, ahead, 24) == 11  # everything held goes out
    assert decode_count(1, None, 7) == 1  # a first chunk is never held back
    assert decode_count(1, 0.1, 7) == 1  # nor audio for a listener close to starving
    assert decode_count(2, 0.3, 7) == 0 and decode_count(2, 0.3, 8) == 2


def test_aligned_decodes_batch_staggered_streams() -> None:
    """Streams admitted on different steps, far ahead of their listeners: after the first aligned
    step they decode in one group per aligned step (never one group per starting phase)."""
    starts = [0, 1, 2, 3, 5, 6, 7, 9, 10, 13]
    pending = dict.fromkeys(range(len(starts)), 0)
    groups_per_step = []
    for step in range(1, 49):
        due = []
        for i, start in enumerate(starts):
            if step > start:
                pending[i] += 1
                if (n := decode_count(pending[i], 5.0, step)):
                    due.append(n)
                    pending[i] -= n
        groups_per_step.append(len(set(due)))
    assert all(g <= 1 for g in groups_per_step[24:])  # settled: one batched decode or none per step
    assert sum(1 for g in groups_per_step[24:] if g) == 3  # steps 32, 40, 48
