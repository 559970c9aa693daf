"""A stream's cancel flag that wakes its reader: `CancelToken`.

`Synthesizer.stream(request, cancel=...)` ends when `cancel` is set from another thread, even while
its reader is blocked waiting for the next chunk. With a plain `threading.Event` the reader has to
look at the flag again and again (every 50 ms): with hundreds of streams open, thousands of
wake-ups a second that each take the interpreter lock, for nothing. A `CancelToken` instead puts
the outbox's end marker (None) into the queues registered with it when it is set, so the reader
blocks until a chunk or the end comes, and a cancel still ends it at once.
"""

from __future__ import annotations

import threading
from typing import Protocol


class _Queue(Protocol):
    def put(self, item: object) -> None: ...


class CancelToken:
    """`set()` / `is_set()` like `threading.Event`, and `wake_on_set(queue)`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._queues: list[_Queue] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._lock:
            if self._set:
                return
            self._set = True
            queues, self._queues = self._queues, []
        for queue in queues:
            queue.put(None)

    def wake_on_set(self, queue: _Queue) -> None:
        """Put None into `queue` when the token is set (at once if it already is)."""
        with self._lock:
            if not self._set:
                self._queues.append(queue)
                return
        queue.put(None)
