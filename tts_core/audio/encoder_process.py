"""One encoder worker process seen from the server: its pipes, and the thread that routes its answers.

Requests go out over the worker's stdin without waiting (`send`); a reader thread per worker puts
each answer on its channel's queue (`Replies`), where the stream's encoder takes it when it wants
it, so a pump never waits for a pipe round trip unless it asks to. When the worker dies, every open
channel gets `WorkerGone` after the answers that did arrive.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import queue
import subprocess
import threading
from pathlib import Path

from ..errors import TTSError
from .encoder_wire import HELLO, Message, pack, read_message

logger = logging.getLogger(__name__)

REPLY_TIMEOUT_S = 30.0  # a worker this late is stuck: it is killed (and replaced)
# Audio for every stream of a worker may be waiting in its stdin: a larger pipe than Linux's 64 kB
# lets the pumps hand over several chunks each (~30 kB per 80 ms of 48 kHz stereo) without
# blocking while the worker is busy. Not above /proc/sys/fs/pipe-max-size's default.
PIPE_BYTES = 1 << 20
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # `python -m tts_core...` runs from here


class EncoderWorkerError(TTSError):
    """The stream's encoder worker died or failed; the stream ends, the other streams go on."""

    def __init__(self, message: str):
        super().__init__(message, code="encoder_failed")


class WorkerGone:
    """Put on every open channel's queue when its worker has died."""

    __slots__ = ("error",)

    def __init__(self, error: str):
        self.error = error


class Replies:
    """The answers of one channel, in the order its requests were sent."""

    __slots__ = ("_queue", "_worker")

    def __init__(self, worker: WorkerProcess):
        self._queue: queue.SimpleQueue[Message | WorkerGone] = queue.SimpleQueue()
        self._worker = worker

    def put(self, item: Message | WorkerGone) -> None:
        self._queue.put(item)

    def take(self, wait: bool, timeout_s: float = REPLY_TIMEOUT_S) -> Message | WorkerGone | None:
        """The next answer; None when none has arrived (`wait` False). A worker that gives no
        answer within `timeout_s` is killed: the answer is then `WorkerGone`."""
        try:
            return self._queue.get(wait, timeout_s) if wait else self._queue.get_nowait()
        except queue.Empty:
            if not wait:
                return None
        logger.error("encoder worker %d gave no answer in %.0f s: killed", self._worker.pid, timeout_s)
        self._worker.process.kill()
        try:
            return self._queue.get(True, timeout_s)
        except queue.Empty:  # the reader thread itself is stuck: give up on this stream
            return WorkerGone(f"encoder worker {self._worker.pid} gave no answer")


class WorkerProcess:
    """One worker: its process, the lock on its stdin, the channels open on it, the reader thread."""

    def __init__(self, slot: int, command: tuple[str, ...], on_exit):
        self.slot = slot
        self.streams = 0  # changed under the pool's lock
        self.ready = threading.Event()  # its hello arrived
        self.gone = threading.Event()  # its reader saw it end (`error` says how)
        self.alive = True
        self.error = ""
        self._on_exit = on_exit
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._channels: dict[int, Replies] = {}
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_PACKAGE_PARENT)
        self.pid = self.process.pid
        assert self.process.stdin is not None
        with contextlib.suppress(OSError, AttributeError):  # a larger pipe is an optimisation only
            fcntl.fcntl(self.process.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        threading.Thread(target=self._read, name=f"encoder-pool-{slot}", daemon=True).start()

    def register(self, channel: int) -> Replies:
        """A queue for `channel`'s answers (raises when the worker is gone)."""
        replies = Replies(self)
        with self._lock:
            if not self.alive:
                raise EncoderWorkerError(self.error)
            self._channels[channel] = replies
        return replies

    def unregister(self, channel: int) -> None:
        """Answers that still come for `channel` are dropped."""
        with self._lock:
            self._channels.pop(channel, None)

    def send(self, channel: int, op: int, payload: bytes = b"") -> None:
        """Write one request (blocks only while the pipe is full); raises when the worker is gone."""
        if not self.alive:
            raise EncoderWorkerError(self.error or f"encoder worker {self.pid} is gone")
        try:
            with self._write_lock:
                assert self.process.stdin is not None
                self.process.stdin.write(pack(channel, op, payload))
                self.process.stdin.flush()
        except (OSError, ValueError):  # its stdin is closed: it died (the reader says how)
            self.process.kill()
            self.gone.wait(REPLY_TIMEOUT_S)
            raise EncoderWorkerError(self.error or f"encoder worker {self.pid} is gone") from None

    def _read(self) -> None:
        assert self.process.stdout is not None
        reason = "exited"
        try:
            while (message := read_message(self.process.stdout)) is not None:
                if message.op == HELLO:
                    self.ready.set()
                    continue
                replies = self._channels.get(message.channel)  # (a dict read is atomic)
                if replies is not None:
                    replies.put(message)
        except Exception as exc:  # a garbled answer: the worker cannot be trusted any more
            reason = f"sent a bad message ({exc})"
            self.process.kill()
        code = self.process.wait()
        self.error = f"encoder worker {self.pid} {reason} (exit code {code}); its streams were ended"
        with self._lock:
            self.alive = False
            channels, self._channels = self._channels, {}
        for replies in channels.values():
            replies.put(WorkerGone(self.error))
        self.gone.set()
        self._on_exit(self)

    def stop(self, timeout_s: float) -> None:
        """Close its stdin (it exits at the end of its messages); kill it if it does not."""
        with self._write_lock:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
