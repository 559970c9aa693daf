"""The engine's first stage: requests turned into jobs on the engine's own thread, in arrival order.

A caller checks its request and resolves the voice in its own thread (that may encode an uploaded
clip, work that holds the interpreter lock little), then `enqueue`s a `Buildable`: the stream
object exists from then on, and the caller reads its outbox at once. The engine thread builds the
job (normalising and splitting the text, tokenising, the prompt rows: pure Python that holds the
lock) between its iterations (`pump`) and admits it, so nothing competes with its device launches
and a burst is admitted in as few waves as possible. A build error or a refusal reaches the caller
as the first item of the outbox; a stream cancelled before it was built is skipped. The records
that decided where preparation runs are in bench/results/archive/ (`gpu-h200-callers-prepare.json`
beside `gpu-h200-2026-12-02-0109.json`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Protocol

from ..errors import TTSError
from .types import StreamHandle, StreamJob, StreamStatus

logger = logging.getLogger(__name__)

# At most this long preparing per engine iteration: a flood of requests must not keep the engine
# thread from the streams it serves (they are far ahead of their listeners).
PUMP_BUDGET_S = 0.1


class Buildable(Protocol):
    """A checked request that can become a job: pure work, no device (see `tts_core/jobs.py`)."""

    def build(self, request_id: str) -> StreamJob: ...


class Intake:
    """A FIFO of requests that the engine threads attached to it build and admit (`pump`).

    Args:
        admit: hands a built stream to the engine (or the pool) that owns this intake; raises when
            it cannot take it.
        cancel: cancels an admitted stream (one whose caller went away meanwhile).
        clock: monotonic seconds, for the pump's time budget (tests pass a fake one).
    """

    def __init__(self, admit: Callable[[StreamHandle], None], cancel: Callable[[StreamHandle], None], *,
                 clock: Callable[[], float] = time.monotonic):
        self._admit = admit
        self._cancel = cancel
        self._clock = clock
        self._queue: deque[tuple[Buildable, StreamHandle]] = deque()
        self._lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []
        self._refusal: TTSError | None = None  # why nothing is taken any more (closed, no engine left)

    # ---- engine side ---------------------------------------------------------------------------

    def attach(self, wake: Callable[[], None]) -> None:
        """An engine thread will pump this; `wake()` tells it a request is queued."""
        with self._lock:
            self._wakers.append(wake)
        wake()

    def detach(self, wake: Callable[[], None], reason: TTSError) -> None:
        """That engine thread pumps no more (it stopped, or its device did); with none left, the
        queued requests and every later one get `reason`."""
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
        """Build and admit queued requests, oldest first, until none is left or `budget_s` has passed
        (the rest wait for the next call; at least one is served); returns how many were served."""
        served, started = 0, self._clock()
        while served == 0 or self._clock() - started < budget_s:
            with self._lock:
                if not self._queue:
                    break
                request, handle = self._queue.popleft()
            self._serve(request, handle)
            served += 1
        return served

    # ---- caller side ---------------------------------------------------------------------------

    def enqueue(self, request: Buildable) -> StreamHandle:
        """The request's stream, queued to be built; raises at once when nothing is taken any more."""
        handle = StreamHandle(request_id=uuid.uuid4().hex)
        with self._lock:
            if self._refusal is not None:
                raise self._refusal
            self._queue.append((request, handle))
            wakers = list(self._wakers)
        for wake in wakers:
            wake()
        return handle

    def close(self) -> None:
        """Take no more requests; the queued ones get an error."""
        self._refuse(TTSError("the synthesizer is shutting down"))

    # ---- internals -----------------------------------------------------------------------------

    def _refuse(self, reason: TTSError) -> None:
        with self._lock:
            self._refusal = self._refusal or reason
            queued, self._queue = list(self._queue), deque()
        for _, handle in queued:
            _fail(handle, reason)

    def _serve(self, request: Buildable, handle: StreamHandle) -> None:
        if handle.cancelled.is_set():  # its caller went away while it waited
            handle.status = StreamStatus.CANCELLED
            handle.outbox.put(None)
            return
        try:
            handle.job = request.build(handle.request_id)
            self._admit(handle)
        except Exception as exc:  # bad input or a refusal goes back to its caller; the engine goes on
            if not isinstance(exc, TTSError):
                logger.exception("preparing a request failed")
            _fail(handle, exc)
            return
        if handle.cancelled.is_set():  # cancelled while it was built: the engine ends it now
            self._cancel(handle)


def _fail(handle: StreamHandle, error: BaseException) -> None:
    handle.status = StreamStatus.FAILED
    handle.outbox.put(error)
    handle.outbox.put(None)
