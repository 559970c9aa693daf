"""Compressed formats encoded in worker processes, so the streams' encoders run on every core.

PyAV's libmp3lame holds the interpreter lock for much of its work: in one server process the mp3
(and aac, opus, flac) encoding of all streams competes for one core, whatever the number of pump
threads. An `EncoderPool` runs N worker processes (`python -m tts_core.audio.encoder_worker`,
started with `subprocess`: never a fork of a process that has torch and the engine's threads; the
worker never imports torch). Each stream is pinned to one worker, the one with the fewest streams
open, when its encoder opens; its pieces of audio go over the worker's stdin and the bytes come
back over its stdout (`encoder_wire.py`, `encoder_process.py`).

`PooledEncoder` has `StreamEncoder`'s interface (`encode`, `collect`, `finish`, `close`,
`encoded_samples`, `pending_samples`, `frame_samples`) and gives the same bytes, but pipelined:
`encode` sends the audio and returns at once with the bytes of the answers that have arrived by
then (an earlier piece's, usually), so the stream's pump thread does not wait for a pipe round
trip and two wake-ups per chunk, and the worker always has audio to encode. `collect(wait=True)`
waits for every answer (what `finish` does, and what a writer calls when it needs exact counts:
the start hold); `encoded_samples` counts the bytes handed out, `pending_samples` the audio sent
whose bytes have not come back. A stream's first `encode` waits for its answer: the worker's
encoder opens with it (an encoder that cannot open fails there) and the codec frame is then known.
At most `MAX_IN_FLIGHT` pieces of a stream are in the worker: a stream further ahead waits for its
oldest answer. Making one touches no pipe (it may be made on the event loop). `open_encoder`
picks the pool for the compressed formats when one runs, the in-process encoder otherwise.

A worker that dies fails its own streams (`EncoderWorkerError`) and is replaced; the others go on.
A worker that dies before it said hello is not restarted (a broken install would loop): its
slot stays empty, and with no worker left `open_encoder` falls back to in-process encoding.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import logging
import sys
import threading
from dataclasses import dataclass

import numpy as np

from ..devices import available_cpus
from .encoder_process import EncoderWorkerError, Replies, WorkerGone, WorkerProcess
from .encoder_wire import CLOSE, ERROR, FINISH, OPEN, PUSH, STATS, Message, parse_result
from .encoders import StreamEncoder, check_rate
from .io import to_int16

logger = logging.getLogger(__name__)

POOLED_FORMATS = frozenset({"mp3", "opus", "aac", "flac"})
# Pieces of one stream in its worker at once: enough to keep the worker busy while the pump
# thread waits for the engine, few enough that a stream's bytes lag its audio by little.
MAX_IN_FLIGHT = 4
WORKER_COMMAND = (sys.executable, "-m", "tts_core.audio.encoder_worker")


def default_encoder_processes(cpus: int | None = None) -> int:
    """The cores the engine and the event loop leave free: one worker per CPU but two (one on 2-3
    CPUs; 0 on a single CPU, where a worker would only add the pipes' cost)."""
    cpus = available_cpus() if cpus is None else int(cpus)
    return max(0, cpus - (2 if cpus >= 4 else 1))


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


class EncoderPool:
    """N encoder worker processes; `open` pins a stream's encoder to the least-loaded one."""

    def __init__(self, processes: int, *, command: tuple[str, ...] = WORKER_COMMAND):
        if processes < 1:
            raise ValueError(f"an encoder pool needs at least one process, got {processes}")
        self.processes = processes
        self._command = command
        self._lock = threading.Lock()
        self._workers: list[WorkerProcess | None] = [None] * processes
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

    def _spawn(self, slot: int) -> WorkerProcess | None:
        try:
            return WorkerProcess(slot, self._command, self._exited)
        except OSError as exc:
            logger.error("encoder worker %d could not start (%s): its streams encode in-process", slot, exc)
            return None

    def _exited(self, worker: WorkerProcess) -> None:
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

    def _release(self, worker: WorkerProcess) -> None:
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
            channel = next(self._channels)
            replies = worker.register(channel)
            try:
                worker.send(channel, STATS)
                answer = replies.take(wait=True, timeout_s=timeout_s)
            finally:
                worker.unregister(channel)
            if not isinstance(answer, Message):
                raise EncoderWorkerError(answer.error if answer is not None else "no answer")
            out.append(json.loads(answer.payload))
        return out

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every worker (their streams get `EncoderWorkerError`); idempotent."""
        with self._lock:
            self._closed = True
            workers = [w for w in self._workers if w is not None]
        for worker in workers:
            worker.stop(timeout_s)


class PooledEncoder:
    """`StreamEncoder`'s interface, encoded by one worker of a pool (see the module docstring).
    Used by one thread at a time (the stream's pump), as `StreamEncoder` is."""

    def __init__(self, pool: EncoderPool, worker: WorkerProcess, channel: int, fmt: str, sample_rate: int,
                 channels: int, bit_rate: int | None):
        problem = check_rate(fmt, sample_rate) if fmt in POOLED_FORMATS else f"{fmt!r} is not encoded in a worker"
        if problem:  # the in-process encoder's error, before anything is sent
            raise ValueError(problem)
        self.fmt, self.sample_rate, self.channels = fmt, int(sample_rate), int(channels)
        self.encoded_samples = 0  # in the bytes handed out so far
        self.pending_samples = 0  # sent, bytes not back yet
        self._frame_samples = 0
        self._pool, self._worker, self._channel = pool, worker, channel
        self._replies: Replies | None = None  # registered with the first audio (OPEN goes with it)
        self._in_flight: collections.deque[int] = collections.deque()  # samples of each unanswered request
        self._open = True
        spec = {"fmt": fmt, "sample_rate": self.sample_rate, "channels": self.channels, "bit_rate": bit_rate}
        self._spec = json.dumps(spec).encode()

    @property
    def worker_pid(self) -> int:
        return self._worker.pid

    @property
    def frame_samples(self) -> int:
        return self._frame_samples

    def _send(self, op: int, payload: bytes = b"", samples: int = 0) -> None:
        if not self._open:
            raise EncoderWorkerError("the stream's encoder is closed")
        try:
            if self._replies is None:  # the worker answers a failed open at the next request
                self._replies = self._worker.register(self._channel)
                self._worker.send(self._channel, OPEN, self._spec)
            self._worker.send(self._channel, op, payload)
        except BaseException:
            self._drop()  # the worker is gone: nothing to close there
            raise
        self._in_flight.append(samples)
        self.pending_samples += samples

    def _take(self, wait: bool) -> bytes | None:
        """The bytes of the oldest unanswered request (None: not back yet, and not `wait`)."""
        assert self._replies is not None
        answer = self._replies.take(wait)
        if answer is None:
            return None
        if isinstance(answer, WorkerGone) or answer.op == ERROR:
            self._drop()  # the worker dropped the channel (error) or died: nothing to close there
            if isinstance(answer, WorkerGone):
                raise EncoderWorkerError(answer.error)
            raise EncoderWorkerError(f"encoder worker: {answer.payload.decode(errors='replace')}")
        self.pending_samples -= self._in_flight.popleft()
        self.encoded_samples, self._frame_samples, data = parse_result(answer.payload)
        return data

    def collect(self, wait: bool = True) -> bytes:
        """The bytes of the answers that are back (`wait`: of every request sent so far)."""
        out = []
        while self._in_flight:
            data = self._take(wait)
            if data is None:
                break
            out.append(data)
        return b"".join(out)

    def encode(self, pcm: np.ndarray) -> bytes:
        """Send `pcm`; the bytes that are back (a first call waits for its own)."""
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.ndim != 2 or pcm.shape[0] != self.channels:
            raise ValueError(f"expected [{self.channels}, n] audio, got shape {list(pcm.shape)}")
        if pcm.shape[1] == 0:  # the compressed formats have no header: nothing to say
            return self.collect(wait=False) if self._open and self._in_flight else b""
        first = self._replies is None
        self._send(PUSH, to_int16(pcm).tobytes(), pcm.shape[1])  # half float32's bytes, the same encode
        out = [self._take(wait=True) or b""] if len(self._in_flight) > MAX_IN_FLIGHT else []
        out.append(self.collect(wait=first))
        return b"".join(out)

    def finish(self) -> bytes:
        self._send(FINISH)
        data = self.collect(wait=True)
        self._drop()
        return data

    def close(self) -> None:
        """Release the worker's encoder without finishing (a stream cut short); a no-op after finish()."""
        if not self._open:
            return
        if self._replies is not None:
            with contextlib.suppress(EncoderWorkerError):  # the worker is gone, and the encoder with it
                self._worker.send(self._channel, CLOSE)
        self._drop()

    def _drop(self) -> None:
        if self._open:
            self._open = False
            self._in_flight.clear()  # their answers will not come (a later collect() has nothing to wait for)
            self.pending_samples = 0
            self._worker.unregister(self._channel)
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
