"""The threads stream pumps run on: started once, then reused from stream to stream.

`threading.Thread.start()` waits until the new thread has run its first Python lines, which needs
the interpreter lock: on a busy server (an engine thread and hundreds of pumps wanting it) that
wait lasted milliseconds. `PumpThreads.run` hands a pump's whole life to an idle thread of its own
pool; when none is idle, a thread of the pool's own (the starter) starts one, so the caller, the
event loop, never waits for a thread to start, even when a burst of requests finds the pool
smaller than the burst. A server so starts as many threads as it ever had streams at once, at its
busiest moment, and none after that.

Every thread runs one pump at a time, from start to end (a pump never waits for a busy thread: the
pool grows instead; only, in a burst, for the starter), and is a daemon, as the per-stream threads
were. Where the C library has
`pthread_setname_np` (Linux), the threads carry the name "stream-pump" in the operating system
too, so `top -H`, `ps -L` and the load bench (`/proc/<pid>/task/<tid>/comm`) can tell them apart.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

OS_THREAD_NAME = b"stream-pump"  # at most 15 bytes (the kernel's limit)


def _libc_setname() -> Callable[[bytes], None] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        setname, self_id = libc.pthread_setname_np, libc.pthread_self
    except (OSError, AttributeError):  # not glibc / not Linux: the threads keep the process's name
        return None
    self_id.restype = ctypes.c_void_p
    setname.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return lambda name: setname(self_id(), name)


_SET_NAME = _libc_setname()


class PumpThreads:
    """Daemon threads running one task at a time; a task never waits for a thread."""

    def __init__(self, name: str = "stream-pump"):
        self._name = name
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._grow: queue.SimpleQueue[int] = queue.SimpleQueue()  # thread numbers for the starter
        self._lock = threading.Lock()
        self._idle = 0
        self._starter: threading.Thread | None = None
        self.started = 0  # threads started so far (the most tasks that ever ran at once)

    @property
    def idle(self) -> int:
        """Threads waiting for a task."""
        with self._lock:
            return self._idle

    def run(self, task: Callable[[], None]) -> None:
        """Run `task` on an idle thread, or on a new one when none is idle."""
        with self._lock:
            start = self._idle == 0
            if start:
                self.started += 1
                number = self.started
            else:
                self._idle -= 1
            if start and self._starter is None:  # (once: the pool's first task)
                self._starter = threading.Thread(target=self._start_threads, name=f"{self._name}-starter",
                                                 daemon=True)
                self._starter.start()
        self._tasks.put(task)
        if start:  # the new thread takes a task (this one, or one put meanwhile): tasks <= threads
            self._grow.put(number)

    def _start_threads(self) -> None:
        if _SET_NAME is not None:
            with contextlib.suppress(Exception):
                _SET_NAME(OS_THREAD_NAME)
        while True:
            number = self._grow.get()
            threading.Thread(target=self._work, name=f"{self._name}-{number}", daemon=True).start()

    def _work(self) -> None:
        if _SET_NAME is not None:
            with contextlib.suppress(Exception):  # a name is a convenience only
                _SET_NAME(OS_THREAD_NAME)
        while True:
            task = self._tasks.get()
            try:
                task()
            except BaseException:  # a pump reports its own errors; this keeps the thread alive
                logger.exception("a stream pump task failed")
            with self._lock:
                self._idle += 1


PUMP_THREADS = PumpThreads()
