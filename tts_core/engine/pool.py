"""Several engines (one per GPU) behind the `Engine` interface: each request goes to the least loaded.

Load is the engine's active + queued streams, read when the request arrives; ties go to the first
engine. An engine that refuses (queue full, or its device stopped responding: `stall.py`) passes the
request on to the next least loaded one; the pool counts as stalled only when every engine is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..errors import EngineStalledError, QueueFullError
from .intake import Intake
from .stream import Stream, StreamStatus
from .types import EngineStats, PoolStats

logger = logging.getLogger(__name__)

_SUMMED = ("active_streams", "queued", "max_active_streams", "max_queue", "submitted", "finished",
           "cancelled", "refused")


def route_order(loads: Sequence[int]) -> list[int]:
    """Engine indices, least loaded first (stable: ties keep the engines' order)."""
    return sorted(range(len(loads)), key=lambda i: loads[i])


class EnginePool:
    """The `Engine` interface (`types.EngineLike`) over several engines; streams submitted here are
    built by whichever engine thread is free first, then routed.

    Args:
        engines: one `Engine` per device (at least one); their streams are counted on the first
            engine's idle signal (give them one signal to share, as `loader.load_parts` does).
    """

    def __init__(self, engines: Sequence):
        if not engines:
            raise ValueError("EnginePool needs at least one engine")
        self.engines = list(engines)
        self.idle = self.engines[0].idle
        self.intake = Intake(self.admit)
        for engine in self.engines:
            engine.attach_intake(self.intake)

    @property
    def runner(self):
        """The first engine's runner (models and config are the same on every device)."""
        return self.engines[0].runner

    def submit(self, stream: Stream) -> Stream:
        self.idle.track(stream)
        try:
            self.intake.submit(stream)
        except BaseException as exc:
            stream.end(StreamStatus.FAILED, exc)
            raise
        return stream

    def admit(self, stream: Stream) -> None:
        loads = [engine.stats().load for engine in self.engines]
        full: QueueFullError | None = None
        stalled: EngineStalledError | None = None
        for index in route_order(loads):
            try:
                return self.engines[index].admit(stream)
            except QueueFullError as exc:
                full = exc
            except EngineStalledError as exc:
                stalled = exc
        refusal = full or stalled  # "busy, retry" when any engine still serves
        assert refusal is not None
        raise refusal

    def warm_prefix(self, rows) -> None:
        for engine in self.engines:
            engine.warm_prefix(rows)

    def stats(self) -> PoolStats:
        per_engine: list[EngineStats] = [engine.stats() for engine in self.engines]
        stalled = sum(s.stalled for s in per_engine)
        # One stuck device leaves the others serving; the server stops answering only when all are.
        return PoolStats(**{key: sum(getattr(s, key) for s in per_engine) for key in _SUMMED},
                         stalled=stalled == len(per_engine), engines=len(per_engine), stalled_engines=stalled,
                         per_engine_active=tuple(s.active_streams for s in per_engine))

    def features(self) -> list:
        return [features for engine in self.engines for features in engine.features()]

    def close(self, timeout_s: float = 5.0) -> None:
        for engine in self.engines:
            engine.close(timeout_s)
