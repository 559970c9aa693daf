"""ZeroGPU's documented contract in the harness: the daily quota per visitor (refused before the
call when it asks for more than is left, charged after it, reset 24 h after first use, xlarge
twice), the duration each call asks for against the time it held its worker, and module-level
placement (what the caller placed "on cuda" reaches the worker before its call)."""

from __future__ import annotations

import os

import pytest
import torch

from studio.zerogpu import harness
from studio.zerogpu.harness import GPU, place_on_cuda, set_quota
from studio.zerogpu.quota import (
    DOCUMENTED_DAILY_S,
    QUOTA_TITLE,
    QuotaExceeded,
    QuotaLedger,
    QuotaPolicy,
    Visitor,
    current_visitor,
    parse_policy,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


ANON, PRO = Visitor("a", "anonymous"), Visitor("p", "pro")


def test_documented_daily_quotas_are_the_defaults():
    assert dict(DOCUMENTED_DAILY_S) == {"anonymous": 120.0, "free": 300.0, "pro": 2400.0}
    ledger = QuotaLedger()
    assert ledger.left_s(ANON) == 120 and ledger.left_s(Visitor("f", "free")) == 300 and ledger.left_s(PRO) == 2400
    assert ledger.left_s(Visitor("x", "unknown-tier")) == 120  # an unknown tier counts as anonymous


def test_a_call_asking_for_more_than_is_left_is_refused_and_the_quota_resets_after_a_day():
    clock = FakeClock()
    ledger = QuotaLedger(QuotaPolicy(), clock=clock)
    ledger.reserve(ANON, 60)
    assert ledger.charge(ANON, requested_s=60, used_s=50.5) == 50.5  # "used": the time held
    clock.now += 3600
    ledger.reserve(ANON, 69)  # 69.5 left
    with pytest.raises(QuotaExceeded) as refused:
        ledger.reserve(ANON, 70)
    error = refused.value
    assert error.title == QUOTA_TITLE and (error.requested_s, error.left_s) == (70, 69.5)
    assert error.retry_in_s == pytest.approx(23 * 3600)
    assert "(70s requested vs. 69s left). Try again in 23:00:00." in str(error)
    ledger.reserve(PRO, 2400)  # another visitor's budget is their own
    clock.now += 23 * 3600
    ledger.reserve(ANON, 120)  # 24 h after the first use: a fresh day


def test_charging_the_reservation_instead_of_the_time_used():
    ledger = QuotaLedger(QuotaPolicy(charge="requested"), clock=FakeClock())
    assert ledger.charge(ANON, requested_s=30, used_s=2) == 30
    assert ledger.left_s(ANON) == 90


def test_policy_from_text_and_bad_values():
    policy = parse_policy("anonymous=10, pro=60")
    assert policy.budget_s("anonymous") == 10 and policy.budget_s("pro") == 60 and policy.budget_s("free") == 300
    assert parse_policy(None).daily_s == dict(DOCUMENTED_DAILY_S)
    with pytest.raises(ValueError, match=r"MOSS_TTS_ZEROGPU_QUOTA='anonymous=lots'.*tier=seconds"):
        parse_policy("anonymous=lots")
    with pytest.raises(ValueError, match="charge must be"):
        QuotaPolicy(charge="both")
    with pytest.raises(ValueError, match=">= 0 seconds"):
        QuotaPolicy(daily_s={"anonymous": -1})


@GPU(duration=lambda n: 20 + n)
def counted(n: int):
    for index in range(n):
        yield index, os.getpid()


@GPU(duration=30, size="xlarge")
def on_a_full_card():
    yield os.getpid()


@pytest.fixture
def quota():
    clock = FakeClock()
    ledger = QuotaLedger(QuotaPolicy(daily_s={"anonymous": 60, "pro": 600}, charge="requested"), clock=clock)
    set_quota(ledger)
    yield ledger
    set_quota(None)


def test_the_harness_charges_each_call_to_its_visitor_and_refuses_before_forking(quota):
    token = current_visitor.set(ANON)
    try:
        assert [i for i, _ in counted(3)] == [0, 1, 2]  # asks 23 s, charged 23 (the reservation)
        usage = counted.usage[-1]
        assert (usage.duration_s, usage.charged_s, usage.visitor, usage.completed) == (23.0, 23.0, ANON, True)
        assert usage.used_s > 0 and usage.overran is False
        assert quota.left_s(ANON) == 37
        calls_before = len(counted.calls)
        with pytest.raises(QuotaExceeded, match=r"\(40s requested vs\. 37s left\)"):
            next(counted(20))
        assert len(counted.calls) == calls_before, "a refused call never reaches a worker"
        with pytest.raises(QuotaExceeded, match=r"\(60s requested"):  # xlarge: twice the quota
            next(on_a_full_card())
    finally:
        current_visitor.reset(token)
    token = current_visitor.set(PRO)
    try:
        list(counted(1))  # a PRO visitor still has theirs
        assert counted.usage[-1].visitor == PRO and quota.left_s(PRO) == 600 - 21
        assert list(on_a_full_card()) and quota.left_s(PRO) == 600 - 21 - 60
    finally:
        current_visitor.reset(token)


def test_a_call_closed_early_is_charged_and_marked_incomplete(quota):
    token = current_visitor.set(PRO)
    try:
        calls = counted(50)
        next(calls)
        calls.close()
        usage = counted.usage[-1]
        assert usage.completed is False and usage.charged_s == 70.0 and quota.left_s(PRO) == 530
    finally:
        current_visitor.reset(token)


class Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.arange(6, dtype=torch.float32))


HELD = place_on_cuda(Holder())


@GPU(duration=10)
def read_placed():
    yield str(HELD.weight.device), float(HELD.weight.sum())


def test_placed_modules_stay_on_the_cpu_here_and_reach_the_workers_device():
    assert any(module is HELD for module in harness._placed) and HELD.weight.device.type == "cpu"
    assert place_on_cuda(HELD) is HELD and sum(module is HELD for module in harness._placed) == 1
    ((device, total),) = list(read_placed())
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert device == expected and total == 15.0
    assert HELD.weight.device.type == "cpu"  # the caller's copy never moves
    assert torch.cuda.is_initialized() is False
