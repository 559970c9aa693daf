"""Codec decodes on worker threads, in submission order, overlapping the LM's next step.

The LM makes frame t+1 while the codec turns frames <= t into audio. The engine thread drains the
queue before it touches codec state itself (a new segment, a released slot) or emits anything, so
each stream's chunks stay in order. A job may hand back a second part (`push`), run on a second
thread: on a GPU the first queues a decode and the second reads its audio out and emits it, so the
next decode launches meanwhile. Both threads keep submission order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, InvalidStateError, ThreadPoolExecutor


def _settle(done: Future, error: BaseException | None = None) -> None:
    try:
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)
    except InvalidStateError:  # cancelled by `close` meanwhile: nobody waits for it
        pass


class CodecPipeline:
    """A two-stage FIFO of codec work. Not thread-safe: one engine thread submits and drains."""

    def __init__(self, split: bool = True) -> None:
        self.split = split
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts-codec")
        self._finisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts-codec-out") if self.split else None
        self._inflight: deque[Future] = deque()

    def push(self, fn: Callable[[], Callable[[], None] | None]) -> None:
        """Run `fn` on the codec thread; if it returns a callable, that runs next on the second
        thread. The job counts as done (`drain`) once both parts have run."""
        done: Future = Future()
        self._inflight.append(done)

        def first() -> None:
            if done.cancelled():
                return
            try:
                then = fn()
            except BaseException as exc:
                _settle(done, exc)
                return
            if then is None:
                _settle(done)
                return

            def second() -> None:
                try:
                    then()
                except BaseException as exc:
                    _settle(done, exc)
                    return
                _settle(done)

            if self._finisher is None:
                second()
                return
            try:
                self._finisher.submit(second)
            except RuntimeError as exc:  # shut down by `close` meanwhile
                _settle(done, exc)

        self._executor.submit(first)

    def drain(self) -> None:
        """Wait for every submitted job; re-raises the first job's exception (after waiting for all)."""
        error: BaseException | None = None
        while self._inflight:
            try:
                exc = self._inflight.popleft().exception()
            except CancelledError:  # by `close` (the engine gave up on a stuck device): nothing to wait for
                continue
            error = error or exc
        if error is not None:
            raise error

    def close(self, wait: bool = True) -> None:
        """Stop the workers; `wait=False` when they may be stuck in a device call that never returns."""
        for done in list(self._inflight):
            done.cancel()  # (only those not settled: a drain then skips them)
        self._executor.shutdown(wait=wait, cancel_futures=True)
        if self._finisher is not None:
            self._finisher.shutdown(wait=wait, cancel_futures=True)
