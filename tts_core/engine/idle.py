"""`IdleSignal`: whether streams are in progress and since when none is, for work that must not
slow a listener (the background compile, the page build, the voices' warm-up).

An engine tracks every stream it is given (`track`: counted until the stream ends, through its end
hook); `wait_quiet` blocks on a condition that those counts wake: no polling. A pool's engines may
share one signal (a stream tracked twice is counted twice and released twice).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

# Work that waits for quiet (compiling, building the page, warming voices) holds the interpreter lock
# for seconds: it starts once no stream has run for QUIET_S, or after MAX_DEFER_S on a never-quiet server.
QUIET_S = 1.0
MAX_DEFER_S = 300.0


class _Ending(Protocol):
    def on_end(self, hook: Callable[..., None]) -> None: ...


class IdleSignal:
    """Counts streams in progress; idle when there are none."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._cond = threading.Condition()
        self._in_progress = 0
        self._idle_since: float | None = clock()
        self._closed = False

    def track(self, stream: _Ending) -> None:
        """Count `stream` as in progress until it ends."""
        with self._cond:
            self._in_progress += 1
            self._idle_since = None
        stream.on_end(self._ended)

    def _ended(self, _stream: object) -> None:
        with self._cond:
            self._in_progress -= 1
            if self._in_progress == 0:
                self._idle_since = self._clock()
                self._cond.notify_all()

    @property
    def in_progress(self) -> int:
        return self._in_progress

    @property
    def idle(self) -> bool:
        return self._in_progress == 0

    def wait_quiet(self, quiet_s: float, timeout_s: float | None = None) -> bool:
        """Block until no stream has been in progress for `quiet_s`; False when `timeout_s` passed
        first or the signal was closed."""
        with self._cond:
            deadline = None if timeout_s is None else self._clock() + timeout_s
            while not self._closed:
                now = self._clock()
                if self._idle_since is not None and now - self._idle_since >= quiet_s:
                    return True
                waits = [] if self._idle_since is None else [quiet_s - (now - self._idle_since)]
                if deadline is not None:
                    if now >= deadline:
                        return False
                    waits.append(deadline - now)
                self._cond.wait(min(waits) if waits else None)
            return False

    def close(self) -> None:
        """Wake every waiter for good (the engine is shutting down)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
