"""The ZeroGPU harness keeps ZeroGPU's contract: forked workers, pickled arguments and results,
relayed yields, stop on close, errors named, no CUDA in the caller, no server socket in a worker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support.folders import child_env

from studio.zerogpu import harness
from studio.zerogpu.harness import GPU, GPUTaskError, parent_cuda_initialized


@GPU(duration=lambda count, **_: 5 + count)
def counting(count: int, *, label: str = "x"):
    for index in range(count):
        yield index, label, os.getpid()


@GPU(duration=30)
def endless(marker: str):
    index = 0
    while True:
        yield index
        index += 1
        Path(marker).write_text(str(index))


@GPU
def regular(value):
    return value * 2, os.getpid()


@GPU
def failing(message: str):
    yield 1
    raise ValueError(message)


@GPU
def unpicklable_result():
    yield threading.Lock()


@GPU
def dying():
    yield "first"
    os._exit(3)


def test_yields_come_from_a_forked_worker_in_order_and_the_worker_is_reused():
    first = list(counting(4, label="a"))
    assert [(i, label) for i, label, _ in first] == [(0, "a"), (1, "a"), (2, "a"), (3, "a")]
    worker = first[0][2]
    assert worker != os.getpid() and {pid for *_, pid in first} == {worker}
    second = list(counting(2, label="b"))
    assert {pid for *_, pid in second} == {worker}, "an idle worker serves the next call"
    assert [c.duration_s for c in counting.calls[-2:]] == [9.0, 7.0]
    assert counting.calls[-1].worker_pid == worker


def test_a_regular_function_returns_its_pickled_result():
    value, pid = regular(21)
    assert value == 42 and pid != os.getpid()


def test_closing_early_stops_the_workers_generator_and_the_worker_serves_again(tmp_path):
    marker = tmp_path / "count"
    calls = endless(str(marker))
    assert [next(calls) for _ in range(3)] == [0, 1, 2]
    calls.close()
    deadline = time.monotonic() + 10
    seen = None
    while time.monotonic() < deadline:  # the worker's count stops growing once it saw the stop
        time.sleep(0.3)
        now = marker.read_text()
        if now == seen:
            break
        seen = now
    assert now == seen, "the worker kept generating after the caller closed"
    again = endless(str(marker))
    assert next(again) == 0
    again.close()


def test_an_error_in_the_worker_is_raised_with_its_class_name():
    calls = failing("boom")
    assert next(calls) == 1
    with pytest.raises(GPUTaskError, match="boom") as info:
        next(calls)
    assert info.value.error_cls == "ValueError"
    assert [index for index, *_ in counting(1)] == [0]  # the worker (or a new one) still serves


def test_arguments_and_results_must_pickle():
    with pytest.raises(TypeError):  # an argument that cannot cross: refused before any worker runs it
        list(regular(threading.Lock()))
    with pytest.raises(GPUTaskError) as info:
        list(unpicklable_result())
    assert info.value.error_cls == "PicklingError"


def test_a_worker_that_dies_mid_call_is_reported_as_aborted():
    calls = dying()
    assert next(calls) == "first"
    with pytest.raises(GPUTaskError, match="aborted") as info:
        next(calls)
    assert info.value.error_cls == "WorkerDied"


def test_duration_is_validated():
    @GPU(duration=lambda: -1)
    def task():
        yield 1

    with pytest.raises(ValueError, match="duration"):
        list(task())


def test_the_caller_never_initialises_cuda():
    import torch

    list(counting(2))
    regular(1)
    assert torch.cuda.is_initialized() is False
    assert parent_cuda_initialized() is False


def test_a_call_after_the_caller_initialised_cuda_is_refused(monkeypatch):
    # No GPU here: the state a CUDA machine would be in is what `parent_cuda_initialized` reads.
    @GPU
    def task():
        yield 1

    monkeypatch.setattr(harness, "parent_cuda_initialized", lambda: True)
    with pytest.raises(GPUTaskError) as info:
        list(task())
    assert info.value.error_cls == "CudaInParent"


def test_a_worker_keeps_none_of_the_callers_sockets_or_pipes():
    """Else a client connection or a child's pipe would stay open for as long as the worker lives."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    read_end, write_end = os.pipe()

    @GPU
    def open_in_worker(numbers):
        still_open = []
        for number in numbers:
            try:
                os.fstat(number)
            except OSError:
                continue
            still_open.append(number)
        return still_open

    try:
        assert open_in_worker([server.fileno(), read_end, write_end]) == []
        os.fstat(server.fileno())  # all still open here
        os.fstat(write_end)
    finally:
        server.close()
        os.close(read_end)
        os.close(write_end)


def test_workers_end_with_the_process_that_forked_them(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import os, time
        from studio.zerogpu.harness import GPU

        @GPU
        def pid():
            yield os.getpid()

        print(next(iter(pid())), flush=True)
        time.sleep(60)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        worker = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)  # no clean-up at all on the caller's side
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(worker):
            time.sleep(0.2)
        assert not _alive(worker), "the worker outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
