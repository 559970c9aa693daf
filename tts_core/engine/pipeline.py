"""Codec decodes on a worker thread, in submission order, overlapping the LM's next step.

On a CPU the frame loop is two jobs of similar size that depend on each other only one way: the
LM makes frame t+1 while the codec turns frames <= t into audio. Run on one thread they add up;
on two cores (one torch thread each) the slower one sets the pace. The engine thread submits a
decode and goes on with the next LM step; before it touches codec state itself (a new segment, a
released slot) or emits anything, it drains the queue, so each stream's chunks stay in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor


class CodecPipeline:
    """A one-worker FIFO of codec work. Not thread-safe: one engine thread submits and drains."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts-codec")
        self._inflight: deque[Future] = deque()

    def submit(self, fn: Callable[[], None]) -> None:
        self._inflight.append(self._executor.submit(fn))

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
        """Stop the worker; `wait=False` when it may be stuck in a device call that never returns."""
        self._executor.shutdown(wait=wait, cancel_futures=True)
