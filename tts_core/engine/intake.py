"""The engine's first stage: submitted streams built and admitted on the engine's own thread, FIFO.

A caller checks its request in its own thread, submits the `Stream` and reads it at once. The
engine thread builds the stream's segments (text, tokens, prompt rows: pure Python) between its
iterations (`pump`) and admits it, so nothing competes with its device launches and a burst is
admitted in as few waves as possible. A build error or a refusal ends the stream with that error;
a stream cancelled before it was built is ended without building. A pool's engines share one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from ..errors import TTSError
from .stream import Stream, StreamStatus

logger = logging.getLogger(__name__)

# At most this long building per engine iteration: a flood of requests must not keep the engine
# thread from the streams it serves.
PUMP_BUDGET_S = 0.1


class Intake:
    """A FIFO of submitted streams that the engine threads attached to it build and admit (`pump`).

    Args:
        admit: hands a built stream to the engine (or the pool) that owns this intake; raises when
            it cannot take it.
        clock: monotonic seconds, for the pump's time budget (tests pass a fake one).
    """

    def __init__(self, admit: Callable[[Stream], None], *, clock: Callable[[], float] = time.monotonic):
        self._admit = admit
        self._clock = clock
        self._queue: deque[Stream] = deque()
        self._lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []
        self._refusal: TTSError | None = None  # why nothing is taken any more (closed, no engine left)

    # ---- engine side ---------------------------------------------------------------------------

    def attach(self, wake: Callable[[], None]) -> None:
        """An engine thread will pump this; `wake()` tells it a stream is queued."""
        with self._lock:
            self._wakers.append(wake)
        wake()

    def detach(self, wake: Callable[[], None], reason: TTSError) -> None:
        """That engine thread pumps no more; with none left, queued and later streams get `reason`."""
        with self._lock:
            if wake in self._wakers:
                self._wakers.remove(wake)
            if self._wakers:
                return
        self._refuse(reason)

    @property
    def waiting(self) -> bool:
        return bool(self._queue)

    def pump(self, budget_s: float = PUMP_BUDGET_S) -> int:
        """Build and admit queued streams, oldest first, until none is left or `budget_s` has passed
        (at least one is served); returns how many were served."""
        served, started = 0, self._clock()
        while served == 0 or self._clock() - started < budget_s:
            with self._lock:
                if not self._queue:
                    break
                stream = self._queue.popleft()
            self._serve(stream)
            served += 1
        return served

    # ---- caller side ---------------------------------------------------------------------------

    def submit(self, stream: Stream) -> None:
        """Queue `stream`; raises at once when nothing is taken any more."""
        with self._lock:
            if self._refusal is not None:
                raise self._refusal
            self._queue.append(stream)
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def close(self) -> None:
        """Take no more streams; the queued ones end with an error."""
        self._refuse(TTSError("the synthesizer is shutting down"))

    # ---- internals -----------------------------------------------------------------------------

    def _refuse(self, reason: TTSError) -> None:
        with self._lock:
            self._refusal = self._refusal or reason
            queued, self._queue = list(self._queue), deque()
        for stream in queued:
            stream.end(StreamStatus.FAILED, reason)

    def _serve(self, stream: Stream) -> None:
        if stream.cancelled:  # its caller went away while it waited
            stream.end(StreamStatus.CANCELLED)
            return
        try:
            stream.build()
            self._admit(stream)  # (a cancel from now on reaches the engine that took it)
        except Exception as exc:  # bad input or a refusal goes back to its caller; the engine goes on
            if not isinstance(exc, TTSError):
                logger.exception("building stream %s failed", stream.id)
            stream.end(StreamStatus.FAILED, exc)
