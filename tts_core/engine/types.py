"""What callers see of an engine: its stats (`EngineStats`, a pool's `PoolStats`) and `EngineLike`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from .idle import IdleSignal
from .stream import Stream


@dataclass(frozen=True, slots=True)
class EngineStats:
    """An engine's occupancy and counters (`Engine.stats`; `/health` shows them, `/metrics` reads them)."""

    active_streams: int  # streams holding a slot
    queued: int  # streams waiting for one
    max_active_streams: int
    max_queue: int
    submitted: int
    finished: int
    cancelled: int
    refused: int  # turned away with a full queue
    stalled: bool  # its device stopped responding (`stall.py`)

    @property
    def load(self) -> int:
        """Streams the engine holds: running + waiting for a slot."""
        return self.active_streams + self.queued

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of `/health` (field names are the keys)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class PoolStats(EngineStats):
    """Several engines' stats (`pool.EnginePool.stats`): counts summed; stalled only when all are."""

    engines: int = 1
    stalled_engines: int = 0
    per_engine_active: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = EngineStats.as_dict(self)
        out["per_engine_active"] = list(self.per_engine_active)
        return out


class EngineLike(Protocol):
    """What the synthesizer uses of an engine: `engine.Engine` (one device) and `pool.EnginePool`."""

    idle: IdleSignal

    def submit(self, stream: Stream) -> Stream:
        """Queue a stream (built on the engine thread if it is not built yet) and return it; raises at
        once when nothing is taken any more. Errors and refusals later end the stream with that error."""

    def warm_prefix(self, rows: np.ndarray) -> None: ...

    def stats(self) -> EngineStats: ...

    def features(self) -> list: ...

    def close(self, timeout_s: float = 5.0) -> None: ...
