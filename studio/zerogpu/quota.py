"""ZeroGPU's daily GPU quota, as the local harness keeps it (Hugging Face keeps the real one).

Per visitor, daily seconds by account tier, reset 24 h after first use (docs/DEPLOY.md, "ZeroGPU as
documented today"). `QuotaLedger` refuses a call that asks for more than the visitor has left
(`QuotaExceeded`, as `spaces` refuses) and charges each finished call its held time
(`charge="used"`) or its whole reservation (`"requested"`). The visitor is read from
`current_visitor`, which the page's event sets from the Gradio request.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DOCUMENTED_DAILY_S: Mapping[str, float] = MappingProxyType({"anonymous": 120.0, "free": 300.0, "pro": 2400.0})
RESET_S = 24 * 3600.0
QUOTA_TITLE = "ZeroGPU quota exceeded"


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who a call is charged to: an id (a hashed IP token or address) and the account tier."""

    id: str = "local"
    tier: str = "anonymous"


LOCAL_VISITOR = Visitor()  # a call made outside a page event (a test, a bench)
current_visitor: contextvars.ContextVar[Visitor] = contextvars.ContextVar("zerogpu_visitor", default=LOCAL_VISITOR)


class QuotaExceeded(RuntimeError):
    """The visitor has less quota left than the call asks for (raised before the call starts)."""

    title = QUOTA_TITLE

    def __init__(self, requested_s: float, left_s: float, retry_in_s: float):
        self.requested_s, self.left_s, self.retry_in_s = requested_s, left_s, retry_in_s
        wait = time.strftime("%H:%M:%S", time.gmtime(max(0.0, retry_in_s)))
        super().__init__(f"You have exceeded your ZeroGPU quota ({math.ceil(requested_s)}s requested vs. "
                         f"{math.floor(left_s)}s left). Try again in {wait}.")


@dataclass(frozen=True, slots=True)
class QuotaPolicy:
    """Daily seconds per tier, the reset period, and what a finished call costs."""

    daily_s: Mapping[str, float] = field(default_factory=lambda: dict(DOCUMENTED_DAILY_S))
    reset_s: float = RESET_S
    charge: str = "used"  # or "requested"

    def __post_init__(self) -> None:
        if self.charge not in ("used", "requested"):
            raise ValueError(f"charge must be 'used' or 'requested', got {self.charge!r}")
        for tier, seconds in self.daily_s.items():
            if not seconds >= 0:
                raise ValueError(f"the daily quota of {tier!r} must be >= 0 seconds, got {seconds!r}")

    def budget_s(self, tier: str) -> float:
        return float(self.daily_s.get(tier, self.daily_s.get("anonymous", 0.0)))


def parse_policy(text: str | None, name: str = "MOSS_TTS_ZEROGPU_QUOTA") -> QuotaPolicy:
    """`anonymous=120,free=300,pro=2400` (seconds a day; tiers not named keep the documented value)."""
    daily = dict(DOCUMENTED_DAILY_S)
    for part in (text or "").split(","):
        if not part.strip():
            continue
        tier, _, value = part.partition("=")
        try:
            daily[tier.strip()] = float(value)
        except ValueError:
            raise ValueError(f"{name}={text!r}: each part is tier=seconds, e.g. anonymous=120,free=300") from None
    return QuotaPolicy(daily_s=daily)


@dataclass(slots=True)
class _Usage:
    since: float
    used_s: float = 0.0


class QuotaLedger:
    """Seconds used per visitor in the current period; thread-safe. `clock` is injectable (tests)."""

    def __init__(self, policy: QuotaPolicy | None = None, clock: Callable[[], float] = time.monotonic):
        self.policy = policy or QuotaPolicy()
        self.clock = clock
        self._usage: dict[str, _Usage] = {}
        self._lock = threading.Lock()

    def _current(self, visitor: Visitor, now: float) -> _Usage | None:
        usage = self._usage.get(visitor.id)
        if usage is not None and now - usage.since >= self.policy.reset_s:
            del self._usage[visitor.id]
            usage = None
        return usage

    def left_s(self, visitor: Visitor) -> float:
        with self._lock:
            usage = self._current(visitor, self.clock())
        return max(0.0, self.policy.budget_s(visitor.tier) - (usage.used_s if usage else 0.0))

    def reserve(self, visitor: Visitor, requested_s: float) -> None:
        """Refuse the call (`QuotaExceeded`) when it asks for more than the visitor has left."""
        with self._lock:
            now = self.clock()
            usage = self._current(visitor, now)
            left = self.policy.budget_s(visitor.tier) - (usage.used_s if usage else 0.0)
            if requested_s > left:
                retry = (usage.since + self.policy.reset_s - now) if usage else self.policy.reset_s
                raise QuotaExceeded(requested_s, max(0.0, left), retry)

    def charge(self, visitor: Visitor, *, requested_s: float, used_s: float) -> float:
        """Book a finished (or failed) call; returns the seconds charged."""
        cost = requested_s if self.policy.charge == "requested" else min(used_s, requested_s)
        with self._lock:
            now = self.clock()
            usage = self._current(visitor, now)
            if usage is None:
                usage = self._usage[visitor.id] = _Usage(since=now)
            usage.used_s += cost
        return cost
