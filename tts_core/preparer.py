"""Request preparation on the engine's thread: text in, a submitted engine stream out, in arrival order.

Turning a request into prompt rows (normalising and splitting the text, tokenising, building the
rows) is pure Python that holds the interpreter lock. Run in the callers' threads, or on a thread
of its own, it contends for the lock with the engine thread's launches (each torch call gives the
lock up and may wait a switch interval to get it back), and every listener's first audio waits.
So the engine thread prepares the queued requests itself (`pump`, between its iterations): nothing
competes with its device work, and a burst is admitted in as few waves as possible. What may be
slow but holds the lock little (resolving the voice, which may encode an uploaded clip) stays in
the caller's thread (`Synthesizer._check`). The side-by-side records that decided it are in
bench/results/archive/ (`gpu-h200-callers-prepare.json` beside `gpu-h200-2026-12-02-0109.json`).

An engine without intake (ZeroGPU's worker) is prepared for in the caller's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .engine.types import StreamHandle
from .errors import TTSError

logger = logging.getLogger(__name__)

_POLL_S = 0.05  # how often a waiting caller looks at its cancel event
# At most this long preparing per engine iteration: a flood of requests must not keep the engine
# thread from the streams it serves (they are ahead of their listeners by far more).
PUMP_BUDGET_S = 0.1


@dataclass(eq=False)
class PendingStream:
    """One request waiting to be prepared: its engine handle or its error, once ready."""

    ready: threading.Event = field(default_factory=threading.Event)
    handle: StreamHandle | None = None
    error: BaseException | None = None
    abandoned: bool = False  # the caller stopped waiting: a handle submitted later is cancelled
    lock: threading.Lock = field(default_factory=threading.Lock)


class Preparer:
    """A FIFO of requests that the engine threads attached to it build and submit (`pump`).

    Args:
        build: turns one queued item into a `StreamJob` (raises for bad input).
        submit: hands a job to the engine, returns its handle (raises when the engine refuses it).
        cancel: cancels a submitted handle (for callers that stopped waiting).
        clock: monotonic seconds, for the pump's time budget (tests pass a fake one).
    """

    def __init__(self, build: Callable[[Any], Any], submit: Callable[[Any], StreamHandle],
                 cancel: Callable[[StreamHandle], None], *, clock: Callable[[], float] = time.monotonic):
        self._build = build
        self._clock = clock
        self._submit = submit
        self._cancel = cancel
        self._queue: deque[tuple[Any, PendingStream]] = deque()
        self._lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []
        self._refusal: TTSError | None = None  # why nothing is prepared any more (closed, no engine left)

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
        """Build and submit queued requests, oldest first (on an engine thread), until none is left
        or `budget_s` has passed (the rest wait for the next call); returns how many were served."""
        served, started = 0, self._clock()
        while served == 0 or self._clock() - started < budget_s:
            with self._lock:
                if not self._queue:
                    break
                item, pending = self._queue.popleft()
            self._serve(item, pending)
            served += 1
        return served

    # ---- caller side ---------------------------------------------------------------------------

    def enqueue(self, item: Any) -> PendingStream:
        pending = PendingStream()
        with self._lock:
            if self._refusal is not None:
                raise self._refusal
            self._queue.append((item, pending))
            wakers = list(self._wakers)
        for wake in wakers:
            wake()
        return pending

    def wait(self, pending: PendingStream, cancel: threading.Event | None = None) -> StreamHandle | None:
        """The request's engine handle once it is submitted; raises its preparation or submission
        error; None when `cancel` was set first (the request is then abandoned)."""
        if cancel is None:
            pending.ready.wait()
        else:
            while not pending.ready.wait(_POLL_S):
                if cancel.is_set():
                    self.abandon(pending)
                    return None
        if pending.error is not None:
            raise pending.error
        return pending.handle

    def abandon(self, pending: PendingStream) -> None:
        """The caller will not read this stream: skip it, or cancel it if it was submitted."""
        with pending.lock:
            pending.abandoned = True
            handle = pending.handle
        if handle is not None:
            self._cancel(handle)

    def close(self) -> None:
        """Refuse new requests; the queued ones get an error."""
        self._refuse(TTSError("the synthesizer is shutting down"))

    # ---- internals -----------------------------------------------------------------------------

    def _refuse(self, reason: TTSError) -> None:
        with self._lock:
            self._refusal = self._refusal or reason
            queued, self._queue = list(self._queue), deque()
        for _, pending in queued:
            self._finish(pending, error=reason)

    def _serve(self, item: Any, pending: PendingStream) -> None:
        if pending.abandoned:
            self._finish(pending)
            return
        try:
            handle = self._submit(self._build(item))
        except Exception as exc:  # bad input or a refusal goes back to its caller; the engine goes on
            if not isinstance(exc, TTSError):
                logger.exception("preparing a request failed")
            self._finish(pending, error=exc)
            return
        self._finish(pending, handle=handle)

    def _finish(self, pending: PendingStream, *, handle: StreamHandle | None = None,
                error: BaseException | None = None) -> None:
        with pending.lock:
            pending.handle, pending.error = handle, error
            abandoned = pending.abandoned
        pending.ready.set()
        if abandoned and handle is not None:
            self._cancel(handle)
