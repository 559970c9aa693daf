"""Slot bookkeeping for continuous batching. Pure Python: never imports torch.

A stream waits in a FIFO queue until a slot (a row of the KV cache and of the codec state) is
free, runs until it finishes or is cancelled, and gives the slot back at once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..errors import QueueFullError


@dataclass(slots=True)
class SchedulerStats:
    submitted: int = 0
    finished: int = 0
    cancelled: int = 0
    refused: int = 0


@dataclass(slots=True)
class Scheduler:
    """Admits stream ids into `num_slots` slots (batch rows of the engine), FIFO, with at most
    `max_queue` waiting for a slot; one more is refused with QueueFullError."""

    num_slots: int
    max_queue: int
    _waiting: deque[str] = field(default_factory=deque)
    _slot_of: dict[str, int] = field(default_factory=dict)
    _free: list[int] = field(default_factory=list)
    stats: SchedulerStats = field(default_factory=SchedulerStats)

    def __post_init__(self) -> None:
        if self.num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {self.num_slots}")
        # Lowest slot first keeps the active rows packed at the front of the batch.
        self._free = list(range(self.num_slots - 1, -1, -1))

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._slot_of)

    def report(self) -> dict:
        """Occupancy and counters: the fields of the engine's `types.EngineStats` but `stalled`."""
        s = self.stats
        return {"active_streams": self.num_running, "queued": self.num_waiting, "max_active_streams": self.num_slots,
                "max_queue": self.max_queue, "submitted": s.submitted, "finished": s.finished,
                "cancelled": s.cancelled, "refused": s.refused}

    def add(self, stream_id: str) -> None:
        """Queue a stream, or refuse it when every slot is busy and the queue is full."""
        if stream_id in self._slot_of or stream_id in self._waiting:
            raise ValueError(f"stream {stream_id} was already added")
        # Waiting streams first fill the free slots (the engine schedules them on its next turn);
        # only those beyond that count against the queue limit.
        if len(self._waiting) >= len(self._free) + self.max_queue:
            self.stats.refused += 1
            raise QueueFullError(
                f"server busy: {self.num_running} streams playing and {len(self._waiting)} waiting "
                f"(queue limit {self.max_queue}); try again in a few seconds",
                retry_after_s=2.0,
            )
        self._waiting.append(stream_id)
        self.stats.submitted += 1

    def schedule(self) -> list[tuple[str, int]]:
        """Move waiting streams into free slots; returns the (stream id, slot) pairs scheduled now."""
        admitted = []
        while self._waiting and self._free:
            stream_id = self._waiting.popleft()
            slot = self._free.pop()
            self._slot_of[stream_id] = slot
            admitted.append((stream_id, slot))
        return admitted

    def finish(self, stream_id: str, *, cancelled: bool = False) -> int | None:
        """Release a running stream's slot (or drop it from the queue). Returns the freed slot."""
        if stream_id in self._waiting:
            self._waiting.remove(stream_id)
            self.stats.cancelled += 1
            return None
        slot = self._slot_of.pop(stream_id, None)
        if slot is None:
            return None
        self._free.append(slot)
        self._free.sort(reverse=True)
        if cancelled:
            self.stats.cancelled += 1
        else:
            self.stats.finished += 1
        return slot
