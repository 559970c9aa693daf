"""A stand-in for `spaces.GPU` that keeps ZeroGPU's contract, for machines without Spaces.

Each call runs in a worker forked from the caller (kept for the next call): pickled arguments and
results, relayed yields, none of the caller's open files, refused once the caller initialised CUDA;
`duration` recorded, the daily quota (`quota.py`) checked before and charged after, `place_on_cuda`d
modules moved to the worker's device first. Not reproduced: Hugging Face's queue and the caller's
CUDA emulation (docs/DEPLOY.md, "ZeroGPU mode: what runs where").
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from .quota import QuotaLedger, Visitor, current_visitor

logger = logging.getLogger(__name__)

_FORK = multiprocessing.get_context("fork")
MAX_IDLE_WORKERS = 2
STOP_GRACE_S = 5.0  # a stopped worker that does not finish its call in this time is killed


class GPUTaskError(RuntimeError):
    """The decorated function failed in its worker (or the worker died). `error_cls` names the
    exception class raised there; the message is its text."""

    def __init__(self, message: str, error_cls: str = "RuntimeError"):
        super().__init__(message)
        self.error_cls = error_cls


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call: the duration asked for and the worker process that ran it."""

    duration_s: float
    worker_pid: int


@dataclass(frozen=True, slots=True)
class CallUsage:
    """One call, once over: asked for vs. held (seconds), whom it was charged to and how much,
    whether it ran to its end, and what the worker moved to its device before it."""

    duration_s: float
    used_s: float
    visitor: Visitor
    charged_s: float
    completed: bool
    moved_bytes: int = 0
    move_s: float = 0.0

    @property
    def overran(self) -> bool:
        return self.used_s > self.duration_s


_quota: QuotaLedger | None = None
_placed: list = []  # modules placed "on cuda" at start-up, moved in the workers (see place_on_cuda)


def set_quota(ledger: QuotaLedger | None) -> None:
    """Keep (or, with None, stop keeping) a daily quota for every decorated function's calls."""
    global _quota
    _quota = ledger


def place_on_cuda(module):
    """The harness's `module.to("cuda")` at start-up: remembered here, moved in each worker. Call it
    in the server process before the first GPU call (workers inherit the list through the fork).
    Returns `module`, still on the CPU here."""
    if not any(placed is module for placed in _placed):
        _placed.append(module)
    return module


def _move_placed() -> tuple[int, float]:
    """Move what was placed to this worker's device (its GPU; the CPU without CUDA): bytes, seconds."""
    if not _placed:
        return 0, 0.0
    import torch  # a worker of a placing process has torch already

    # With its index: a tensor on "cuda:0" compares unequal to torch.device("cuda"), and an idle
    # worker's second call would count weights that are already there as moved.
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    started, moved = time.perf_counter(), 0
    for module in _placed:
        tensors = [*module.parameters(), *module.buffers()]
        moved += sum(t.numel() * t.element_size() for t in tensors if t.device != device)
        module.to(device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return moved, time.perf_counter() - started


def parent_cuda_initialized() -> bool:
    """Whether this process initialised CUDA (without importing torch or touching the GPU)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _send(conn: Connection, message: tuple) -> bool:
    """Pickle and send; an unpicklable message is replaced by an error. False if the pipe is gone."""
    try:
        data = pickle.dumps(message)
    except Exception as exc:  # what the task returned cannot cross the process boundary
        data = pickle.dumps(("error", "PicklingError", f"a result could not be pickled: {exc}", ""))
    try:
        conn.send_bytes(data)
    except (BrokenPipeError, OSError):
        return False
    return True


def _close_inherited_fds(keep: int) -> None:
    """Close every file the fork inherited but this worker's pipe and stdio (ZeroGPU closes the
    server's sockets likewise): a worker must not hold the server's port, its clients' connections
    (a client would wait for an end that never comes) or other processes' pipes open."""
    fd_dir = "/proc/self/fd"
    names = os.listdir(fd_dir) if os.path.isdir(fd_dir) else [str(fd) for fd in range(3, 1024)]
    for name in names:
        fd = int(name)
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):  # not open (or the listing's own descriptor, gone)
                os.close(fd)


def _exit_with_parent(parent_pid: int) -> None:
    """End this worker when the process that forked it is gone (it never outlives the server)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="zerogpu-parent-watch", daemon=True).start()


def _worker_main(task: Callable, conn: Connection, stop, parent_pid: int, inherited: list[Connection]) -> None:
    """The worker's loop: one call at a time until the caller closes the pipe (or goes away)."""
    for other in inherited:  # the caller's ends of this and older workers' pipes (objects, then fds)
        other.close()
    _close_inherited_fds(keep=conn.fileno())
    # The server's signal handlers (uvicorn's) came with the fork: a worker ends on SIGTERM / SIGINT.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _exit_with_parent(parent_pid)
    while True:
        try:
            args, kwargs = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        stop.clear()
        ok = True
        moved = (0, 0.0)
        try:
            moved = _move_placed()
            result = task(*args, **kwargs)
            if inspect.isgenerator(result):
                for item in result:
                    if stop.is_set():
                        result.close()  # like ZeroGPU: the item made after the stop is dropped
                        break
                    if not (ok := _send(conn, ("item", item))):
                        result.close()
                        break
            else:
                ok = _send(conn, ("item", result))
        except Exception as exc:
            ok = _send(conn, ("error", type(exc).__name__, str(exc), traceback.format_exc()))
        if not (ok and _send(conn, ("end", *moved))):
            return


class _Worker:
    def __init__(self, task: Callable, inherited: list[Connection]):
        self.conn, child_conn = _FORK.Pipe(duplex=True)
        self.stop = _FORK.Event()
        self.process = _FORK.Process(target=_worker_main, daemon=True, name="zerogpu-worker",
                                     args=(task, child_conn, self.stop, os.getpid(), [self.conn, *inherited]))
        self.process.start()
        _connections.add(self.conn)
        child_conn.close()  # only the worker holds its end: its death reads as end-of-file here
        logger.info("ZeroGPU harness: forked worker pid %d for %s", self.process.pid,
                    getattr(task, "__name__", "a task"))

    @property
    def pid(self) -> int:
        return self.process.pid

    def receive(self) -> tuple:
        try:
            return pickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            code = self.process.exitcode
            raise GPUTaskError(f"GPU task aborted: the worker process ended (exit code {code})",
                               "WorkerDied") from None

    def close(self) -> None:
        self.conn.close()
        self.process.join(1.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(1.0)

    def finish_after_stop(self, pool: _Pool) -> None:
        """Wait (in a thread) for the stopped call's end, then reuse the worker; kill it if it lingers."""

        def drain() -> None:
            try:
                while self.conn.poll(STOP_GRACE_S):
                    if self.receive()[0] == "end":
                        pool.give(self)
                        return
            except GPUTaskError:
                pass
            self.close()

        threading.Thread(target=drain, name="zerogpu-drain", daemon=True).start()


_connections: weakref.WeakSet[Connection] = weakref.WeakSet()  # callers' ends of every worker's pipe


def _live_connections() -> list[Connection]:
    return [conn for conn in list(_connections) if not conn.closed]


class _Pool:
    """Idle workers of one decorated function."""

    def __init__(self, task: Callable):
        self.task = task
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                worker.close()
        if parent_cuda_initialized():
            raise GPUTaskError("CUDA was initialised in the server process; a forked GPU worker cannot use it "
                               "then. Keep CUDA out of the server process in ZeroGPU mode.", "CudaInParent")
        return _Worker(self.task, _live_connections())

    def give(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE_WORKERS and worker.process.is_alive():
                self._idle.append(worker)
                return
        worker.close()


def _duration_s(duration: Any, args: tuple, kwargs: dict) -> float:
    value = duration(*args, **kwargs) if callable(duration) else duration
    if value is None:
        return 60.0  # ZeroGPU's default
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ValueError(f"duration must be a positive number of seconds, got {value!r}")
    return float(seconds)


def GPU(task: Callable | None = None, *, duration: Any = None, size: str | None = None) -> Callable:
    """Decorate `task` like `spaces.GPU(duration=..., size=...)` (see the module doc).

    The decorated function has a `calls` list of `CallRecord`s and `close_workers()`.
    """
    if task is None:
        return functools.partial(GPU, duration=duration, size=size)
    if size not in (None, "large", "xlarge"):
        raise ValueError(f"size must be 'large' or 'xlarge', got {size!r}")
    pool = _Pool(task)
    calls: list[CallRecord] = []
    usage: list[CallUsage] = []
    weight = 2.0 if size == "xlarge" else 1.0  # a full card costs twice the quota

    def start(args: tuple, kwargs: dict) -> tuple[_Worker, float, Visitor, float]:
        seconds = _duration_s(duration, args, kwargs)
        payload = pickle.dumps((args, kwargs))  # an unpicklable argument fails here, in the caller
        visitor = current_visitor.get()
        if _quota is not None:
            _quota.reserve(visitor, seconds * weight)
        worker = pool.take()
        calls.append(CallRecord(duration_s=seconds, worker_pid=worker.pid))
        try:
            worker.conn.send_bytes(payload)
        except (BrokenPipeError, OSError):
            worker.close()
            raise GPUTaskError("GPU task aborted: the worker process is gone", "WorkerDied") from None
        return worker, seconds, visitor, time.monotonic()

    def results(started: tuple[_Worker, float, Visitor, float]) -> Iterator[Any]:
        worker, seconds, visitor, began = started
        finished = False
        moved = (0, 0.0)
        try:
            while True:
                message = worker.receive()
                if message[0] == "item":
                    yield message[1]
                elif message[0] == "error":
                    end = worker.receive()
                    finished = end[0] == "end"
                    moved = end[1:] if finished else moved
                    _, error_cls, text, trace = message
                    logger.debug("ZeroGPU harness: the task failed in its worker:\n%s", trace)
                    raise GPUTaskError(text, error_cls)
                else:
                    finished = True
                    moved = message[1:]
                    return
        finally:
            used = time.monotonic() - began
            charged = _quota.charge(visitor, requested_s=seconds * weight, used_s=used * weight) if _quota else 0.0
            usage.append(CallUsage(duration_s=seconds, used_s=used, visitor=visitor, charged_s=charged,
                                   completed=finished, moved_bytes=int(moved[0]), move_s=float(moved[1])))
            if finished:
                pool.give(worker)
            else:  # closed early, or the worker failed: stop its call, reuse it once it is done
                worker.stop.set()
                worker.finish_after_stop(pool)

    if inspect.isgeneratorfunction(task):

        @functools.wraps(task)
        def generator_call(*args, **kwargs):
            yield from results(start(args, kwargs))

        wrapper = generator_call
    else:

        @functools.wraps(task)
        def regular_call(*args, **kwargs):
            values = list(results(start(args, kwargs)))
            return values[0] if values else None

        wrapper = regular_call

    def close_workers() -> None:
        with pool._lock:
            idle, pool._idle = pool._idle, []
        for worker in idle:
            worker.close()

    wrapper.calls = calls
    wrapper.usage = usage
    wrapper.close_workers = close_workers
    wrapper.harness_pid = os.getpid()
    return wrapper
