"""Compressed formats encoded in worker processes, so the streams' encoders run on every core.

PyAV's libmp3lame holds the interpreter lock for much of its work: in one server process the mp3
(and aac, opus, flac) encoding of all streams competes for one core, whatever the number of pump
threads. An `EncoderPool` runs N worker processes (`python -m tts_core.audio.encoder_worker`,
started with `subprocess`: never a fork of a process that has torch and the engine's threads; the
worker never imports torch). Each stream is pinned to one worker, the one with the fewest streams
open, when its encoder opens; its pieces of audio go over the worker's stdin and the bytes come
back over its stdout (`encoder_wire.py`), read by one thread per worker that hands each answer to
the stream waiting for it.

`PooledEncoder` has `StreamEncoder`'s interface (`encode`, `finish`, `close`, `encoded_samples`,
`frame_samples`) and gives the same bytes; each call waits for its answer in the caller's thread
(the stream's pump thread, which would otherwise be encoding), so a stream's bytes and its
`encoded_samples` are exact after every call, as in-process. Making one touches no pipe (it may
be made on the event loop): the worker's encoder opens with the stream's first audio. `open_encoder` picks the pool for the
compressed formats when one runs, the in-process encoder otherwise (raw formats are cheap).

A worker that dies fails its own streams (`EncoderWorkerError`) and is replaced; the others go on.
A worker that dies before it said hello is not restarted (a broken install would loop): its
slot stays empty, and with no worker left `open_encoder` falls back to in-process encoding.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TTSError
from .encoder_wire import (
    CLOSE,
    ERROR,
    FINISH,
    HELLO,
    OPEN,
    PUSH,
    STATS,
    Message,
    pack,
    parse_result,
    read_message,
)
from .encoders import StreamEncoder, check_rate

logger = logging.getLogger(__name__)

POOLED_FORMATS = frozenset({"mp3", "opus", "aac", "flac"})
MAX_DEFAULT_PROCESSES = 8
REPLY_TIMEOUT_S = 30.0  # a worker this late is stuck: it is killed (and replaced)
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # `python -m tts_core...` runs from here
WORKER_COMMAND = (sys.executable, "-m", "tts_core.audio.encoder_worker")


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_encoder_processes(cpus: int | None = None) -> int:
    """One worker per CPU but one (left to the event loop and the engine), at most 8; 0 (encode
    in-process) on a single CPU, where a worker would only add the pipes' cost."""
    cpus = available_cpus() if cpus is None else int(cpus)
    return max(0, min(MAX_DEFAULT_PROCESSES, cpus - 1))


class EncoderWorkerError(TTSError):
    """The stream's encoder worker died or failed; the stream ends, the other streams go on."""

    def __init__(self, message: str):
        super().__init__(message, code="encoder_failed")


@dataclass(frozen=True, slots=True)
class WorkerState:
    slot: int
    pid: int | None
    alive: bool
    streams: int  # streams pinned to it now


@dataclass(frozen=True, slots=True)
class PoolStats:
    processes: int  # configured
    live: int
    open_streams: int
    restarts: int
    workers: tuple[WorkerState, ...]


class _Call:
    """One request waiting for its answer."""

    __slots__ = ("done", "error", "message")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.message: Message | None = None
        self.error: str | None = None


class _WorkerProcess:
    """One worker: its process, the lock on its stdin, and the thread that reads its answers."""

    def __init__(self, slot: int, command: tuple[str, ...], on_exit):
        self.slot = slot
        self.streams = 0  # changed under the pool's lock
        self.ready = threading.Event()  # its hello arrived
        self.alive = True
        self.error = ""
        self._on_exit = on_exit
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[int, _Call] = {}
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_PACKAGE_PARENT)
        self.pid = self.process.pid
        threading.Thread(target=self._read, name=f"encoder-pool-{slot}", daemon=True).start()

    def request(self, channel: int, op: int, payload: bytes = b"", *, answer: bool = True,
                timeout_s: float = REPLY_TIMEOUT_S) -> Message | None:
        call = _Call() if answer else None
        with self._lock:
            if not self.alive:
                raise EncoderWorkerError(self.error)
            if call is not None:
                self._pending[channel] = call
        try:
            with self._write_lock:
                assert self.process.stdin is not None
                self.process.stdin.write(pack(channel, op, payload))
                self.process.stdin.flush()
        except (OSError, ValueError):  # its stdin is closed: it died (the reader reports how)
            self.process.kill()
            with self._lock:
                self._pending.pop(channel, None)
            raise EncoderWorkerError(self.error or f"encoder worker {self.pid} is gone") from None
        if call is None:
            return None
        if not call.done.wait(timeout_s):
            logger.error("encoder worker %d gave no answer in %.0f s: killed", self.pid, timeout_s)
            self.process.kill()
            call.done.wait(timeout_s)
        if call.message is None:
            raise EncoderWorkerError(call.error or f"encoder worker {self.pid} gave no answer")
        if call.message.op == ERROR:
            raise EncoderWorkerError(f"encoder worker: {call.message.payload.decode(errors='replace')}")
        return call.message

    def _read(self) -> None:
        assert self.process.stdout is not None
        reason = "exited"
        try:
            while (message := read_message(self.process.stdout)) is not None:
                if message.op == HELLO:
                    self.ready.set()
                    continue
                with self._lock:
                    call = self._pending.pop(message.channel, None)
                if call is not None:
                    call.message = message
                    call.done.set()
        except Exception as exc:  # a garbled answer: the worker cannot be trusted any more
            reason = f"sent a bad message ({exc})"
            self.process.kill()
        code = self.process.wait()
        self.error = f"encoder worker {self.pid} {reason} (exit code {code}); its streams were ended"
        with self._lock:
            self.alive = False
            pending, self._pending = self._pending, {}
        for call in pending.values():
            call.error = self.error
            call.done.set()
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


class EncoderPool:
    """N encoder worker processes; `open` pins a stream's encoder to the least-loaded one."""

    def __init__(self, processes: int, *, command: tuple[str, ...] = WORKER_COMMAND):
        if processes < 1:
            raise ValueError(f"an encoder pool needs at least one process, got {processes}")
        self.processes = processes
        self._command = command
        self._lock = threading.Lock()
        self._workers: list[_WorkerProcess | None] = [None] * processes
        self._channels = itertools.count(1)  # channel 0 is the workers' hello
        self._closed = False
        self._started = False
        self.restarts = 0

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            for slot in range(self.processes):
                self._workers[slot] = self._spawn(slot)
        logger.info("encoder pool: %d worker processes for mp3/opus/aac/flac", self.processes)

    def _spawn(self, slot: int) -> _WorkerProcess | None:
        try:
            return _WorkerProcess(slot, self._command, self._exited)
        except OSError as exc:
            logger.error("encoder worker %d could not start (%s): its streams encode in-process", slot, exc)
            return None

    def _exited(self, worker: _WorkerProcess) -> None:
        with self._lock:
            if self._closed or self._workers[worker.slot] is not worker:
                return
            if not worker.ready.is_set():
                logger.error("%s before it started: not restarted", worker.error)
                self._workers[worker.slot] = None
                return
            logger.warning("%s; starting a new worker", worker.error)
            self.restarts += 1
            self._workers[worker.slot] = self._spawn(worker.slot)

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """Until every worker said hello (tests, the bench); False when one did not in time."""
        with self._lock:
            workers = [w for w in self._workers if w is not None]
        return all(w.ready.wait(timeout_s) for w in workers)

    @property
    def live(self) -> int:
        with self._lock:
            return sum(1 for w in self._workers if w is not None and w.alive)

    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._workers if w is not None and w.alive]

    def open(self, fmt: str, sample_rate: int, channels: int, *, bit_rate: int | None = None) -> PooledEncoder:
        with self._lock:
            live = [w for w in self._workers if w is not None and w.alive]
            if self._closed or not live:
                raise EncoderWorkerError("no encoder worker is running")
            worker = min(live, key=lambda w: w.streams)
            worker.streams += 1
            channel = next(self._channels)
        try:
            return PooledEncoder(self, worker, channel, fmt, sample_rate, channels, bit_rate)
        except BaseException:
            self._release(worker)
            raise

    def _release(self, worker: _WorkerProcess) -> None:
        with self._lock:
            worker.streams -= 1

    def stats(self) -> PoolStats:
        with self._lock:
            states = tuple(WorkerState(slot, w.pid if w else None, bool(w and w.alive), w.streams if w else 0)
                           for slot, w in enumerate(self._workers))
        return PoolStats(self.processes, sum(s.alive for s in states), sum(s.streams for s in states),
                         self.restarts, states)

    def worker_stats(self, timeout_s: float = 10.0) -> list[dict]:
        """What each live worker says of itself (open encoders, whether torch is loaded)."""
        with self._lock:
            live = [w for w in self._workers if w is not None and w.alive]
        out = []
        for worker in live:
            message = worker.request(next(self._channels), STATS, timeout_s=timeout_s)
            assert message is not None
            out.append(json.loads(message.payload))
        return out

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every worker (their streams get `EncoderWorkerError`); idempotent."""
        with self._lock:
            self._closed = True
            workers = [w for w in self._workers if w is not None]
        for worker in workers:
            worker.stop(timeout_s)


class PooledEncoder:
    """`StreamEncoder`'s interface, encoded by one worker of a pool (see the module docstring)."""

    def __init__(self, pool: EncoderPool, worker: _WorkerProcess, channel: int, fmt: str, sample_rate: int,
                 channels: int, bit_rate: int | None):
        problem = check_rate(fmt, sample_rate) if fmt in POOLED_FORMATS else f"{fmt!r} is not encoded in a worker"
        if problem:  # the in-process encoder's error, before anything is sent
            raise ValueError(problem)
        self.fmt, self.sample_rate, self.channels = fmt, int(sample_rate), int(channels)
        self.encoded_samples = 0
        self._frame_samples = 0
        self._pool, self._worker, self._channel = pool, worker, channel
        self._open = True
        self._sent_open = False
        spec = {"fmt": fmt, "sample_rate": self.sample_rate, "channels": self.channels, "bit_rate": bit_rate}
        self._spec = json.dumps(spec).encode()

    @property
    def worker_pid(self) -> int:
        return self._worker.pid

    @property
    def frame_samples(self) -> int:
        return self._frame_samples

    def _call(self, op: int, payload: bytes = b"") -> bytes:
        if not self._open:
            raise EncoderWorkerError("the stream's encoder is closed")
        try:
            if not self._sent_open:  # the worker answers a failed open at this request
                self._sent_open = True
                self._worker.request(self._channel, OPEN, self._spec, answer=False)
            message = self._worker.request(self._channel, op, payload)
        except BaseException:
            self._drop()  # the worker dropped the channel (error) or died: nothing to close there
            raise
        assert message is not None
        self.encoded_samples, self._frame_samples, data = parse_result(message.payload)
        return data

    def encode(self, pcm: np.ndarray) -> bytes:
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.ndim != 2 or pcm.shape[0] != self.channels:
            raise ValueError(f"expected [{self.channels}, n] audio, got shape {list(pcm.shape)}")
        if pcm.shape[1] == 0:  # the compressed formats have no header: nothing to say
            return b""
        return self._call(PUSH, np.ascontiguousarray(pcm, dtype="<f4").tobytes())

    def finish(self) -> bytes:
        data = self._call(FINISH)
        self._drop()
        return data

    def close(self) -> None:
        """Release the worker's encoder without finishing (a stream cut short); a no-op after finish()."""
        if not self._open:
            return
        try:
            if self._sent_open:
                self._worker.request(self._channel, CLOSE, answer=False)
        except EncoderWorkerError:  # the worker is gone, and the encoder with it
            pass
        self._drop()

    def _drop(self) -> None:
        if self._open:
            self._open = False
            self._pool._release(self._worker)


def open_encoder(pool: EncoderPool | None, fmt: str, sample_rate: int, channels: int, *,
                 bit_rate: int | None = None) -> StreamEncoder | PooledEncoder:
    """A stream's encoder: in a worker of `pool` for the compressed formats when a worker runs,
    in-process otherwise (and when no worker could take the stream)."""
    if pool is not None and fmt in POOLED_FORMATS and pool.live:
        try:
            return pool.open(fmt, sample_rate, channels, bit_rate=bit_rate)
        except EncoderWorkerError as exc:
            logger.warning("encoding in-process: %s", exc)
    return StreamEncoder(fmt, sample_rate, channels, bit_rate=bit_rate)
