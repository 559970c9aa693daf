"""A stuck device ends in an error, not in silence.

`StallWatch` runs beside the engine thread, which marks when each iteration starts and ends; an
iteration still running after `timeout_s` calls `on_stall` once, from the watch's thread. The
engine then fails every stream it holds and refuses new ones until a restart (/health says so).
The limit is far above any normal iteration (start-up compiles and captures run outside them).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

logger = logging.getLogger(__name__)


class StallWatch:
    """Watches the engine's iterations from a daemon thread of its own: an iteration running
    `timeout_s` is a stall, reported once to `on_stall(seconds)`. `clock` (monotonic seconds) and
    `start=False` let tests drive `check` themselves."""

    def __init__(self, timeout_s: float, on_stall: Callable[[float], None], *,
                 clock: Callable[[], float] = time.monotonic, start: bool = True):
        if not timeout_s > 0:
            raise ValueError(f"stall timeout must be > 0 seconds, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self._on_stall = on_stall
        self._clock = clock
        self._busy_since: float | None = None
        self.stalled_after_s: float | None = None  # set once a stall was reported
        self._stop = threading.Event()
        self._thread = None
        if start:
            self._thread = threading.Thread(target=self._watch, name="tts-engine-watch", daemon=True)
            self._thread.start()

    def busy(self) -> None:
        """An iteration starts (engine thread)."""
        self._busy_since = self._clock()

    def idle(self) -> None:
        """The iteration ended (engine thread)."""
        self._busy_since = None

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """`busy()` ... `idle()` around a block of engine work."""
        self.busy()
        try:
            yield
        finally:
            self.idle()

    def check(self) -> bool:
        """Report a stall if the running iteration has passed the limit; True when reported now."""
        since = self._busy_since
        if since is None or self.stalled_after_s is not None:
            return False
        ran = self._clock() - since
        if ran < self.timeout_s:
            return False
        self.stalled_after_s = ran
        try:
            self._on_stall(ran)
        except Exception:  # the watch must not die silently, nor take anything down with it
            logger.exception("reporting a stalled engine failed")
        return True

    def _watch(self) -> None:
        poll_s = min(1.0, self.timeout_s / 4)
        while not self._stop.wait(poll_s):
            if self.check():
                return

    def close(self) -> None:
        self._stop.set()
