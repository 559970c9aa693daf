"""`python app.py` as users start it, run and watched from outside: the one launcher that the
benches and the tests share.

`app_process` starts a command with its output in a log file and always stops it (terminate, then
kill); `AppProcess` is the running server seen from outside (its process, /health, the log's end);
`wait_ready` / `wait_idle` poll /health. `launch_app` is the tiny-checkpoint app of the reliability
tests and figures (PROC_MAX_ACTIVE slots, PROC_MAX_QUEUE queued), `AppProc` adds what they compare
at idle (memory, threads, descriptors, temporary files), and `PeakRss` samples a process's peak
memory while a scenario runs. Nothing here asks the server anything but HTTP, so any version of it
can be driven.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]
# launch_app's engine: 4 streams decoded together, 12 more may wait, the rest get 503.
PROC_MAX_ACTIVE = 4
PROC_MAX_QUEUE = 12


class AppFailed(RuntimeError):
    """The app exited, failed to load, failed to build its page, or was not ready in time."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(process: subprocess.Popen, timeout_s: float = 15) -> None:
    """Terminate `process`, and kill it when it has not exited within `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def app_process(command: list[str], *, cwd: Path, env: dict, log_path: Path,
                cpus: Sequence[int] | None = None) -> Iterator[subprocess.Popen]:
    """Start `command` (`python app.py ...`) with its output in `log_path`, pinned to `cpus` when
    given; stop it on exit."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    try:
        yield process
    finally:
        stop_process(process)


def app_env(port: int, work: Path, *, threads: str | None = None, extra: dict[str, str] | None = None) -> dict:
    """The environment of an app started for a run: this one's, the port, no network or analytics,
    its voice cache and temporary files under `work`, no Space or size limits inherited."""
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    (work / "cache").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "MOSS_TTS_CACHE_DIR": str(work / "cache"), "PYTHONUNBUFFERED": "1",
           "TMPDIR": str(work / "tmp"), "GRADIO_TEMP_DIR": str(work / "tmp" / "gradio")}
    for name in ("SPACE_ID", "MOSS_TTS_ALLOW_REMOTE_AUDIO", "MOSS_TTS_MAX_ACTIVE", "MOSS_TTS_MAX_QUEUE"):
        env.pop(name, None)
    if threads:
        env["MOSS_TTS_NUM_THREADS"] = threads
    env.update(extra or {})
    return env


class AppLike(Protocol):
    process: subprocess.Popen

    def health(self) -> dict: ...

    def log_tail(self, num_chars: int = 4000) -> str: ...


def wait_ready(app: AppLike, timeout_s: float) -> dict:
    """Poll /health until the model is ready and the page is not building (app.py builds it once
    the model is ready); returns that health. Raises `AppFailed`, with the log's end, when the app
    exits or fails."""
    deadline = time.monotonic() + timeout_s
    status = "no answer"
    while time.monotonic() < deadline:
        if app.process.poll() is not None:
            raise AppFailed(f"app.py exited with {app.process.returncode}:\n{app.log_tail()}")
        try:
            health = app.health()
            status = health.get("status")
            if status == "ready" and health.get("page") == "failed":
                raise AppFailed(f"the page failed to build:\n{app.log_tail()}")
            if status == "ready" and health.get("page") != "building":
                return health
            if status == "failed":
                raise AppFailed(f"model failed to load: {health.get('error')}\n{app.log_tail()}")
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise AppFailed(f"app not ready after {timeout_s} s (last status: {status}):\n{app.log_tail()}")


def wait_idle(health: Callable[[], dict], timeout_s: float) -> dict:
    """Poll `health()` until no stream is active or queued; returns the last health."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = health()
        if current["active_streams"] == 0 and current["queued"] == 0:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"engine still busy after {timeout_s} s: {current}")
        time.sleep(0.05)


@dataclass
class AppProcess:
    """A running `python app.py` seen from outside: `url` has no trailing slash."""

    url: str
    process: subprocess.Popen
    log_path: Path

    @property
    def ps(self) -> psutil.Process:
        return psutil.Process(self.process.pid)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()

    def log_tail(self, num_chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-num_chars:]

    def wait_ready(self, timeout_s: float) -> dict:
        return wait_ready(self, timeout_s)

    def wait_idle(self, timeout_s: float = 20.0) -> dict:
        return wait_idle(self.health, timeout_s)


def tiny_app_command(data_dir: Path, *extra_args: str) -> list[str]:
    """`python app.py` on the tiny parity checkpoints of the shared data, its tokenizer and clips."""
    return [sys.executable, "app.py",
            "--lm", str(data_dir / "parity" / "tiny_lm"), "--codec", str(data_dir / "parity" / "tiny_codec"),
            "--tokenizer", str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
            "--voices-dir", str(data_dir / "presets"), *extra_args]


@dataclass(kw_only=True)
class AppProc(AppProcess):
    """`launch_app`'s server, with what the reliability checks compare at idle."""

    tmp_dir: Path  # TMPDIR and GRADIO_TEMP_DIR of the app: must stay empty of our requests' files
    cache_dir: Path
    _baseline: dict | None = None

    def snapshot(self) -> dict:
        """Resident memory (MiB), threads, open file descriptors, files under the temp dirs."""
        ps = self.ps
        return {"rss_mib": round(ps.memory_info().rss / 2**20, 1), "threads": ps.num_threads(),
                "fds": ps.num_fds(), "tmp_files": sum(1 for p in self.tmp_dir.rglob("*") if p.is_file())}

    def pruned_snapshot(self) -> dict:
        """`snapshot()` once idle worker threads are gone.

        anyio keeps idle worker threads and prunes those idle for 10 s when the next call needs a
        worker; so: wait 10.5 s, make one call that runs in a worker (/health), let the pruned
        threads exit, then count.
        """
        time.sleep(10.5)
        self.health()
        last = self.snapshot()
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # pruned threads are told to stop; give them a moment
            time.sleep(0.3)
            now = self.snapshot()
            if now["threads"] == last["threads"]:
                return now
            last = now
        return last

    def baseline(self) -> dict:
        """The pruned snapshot of the idle server, taken once (the first time it is asked for)."""
        if self._baseline is None:
            self.wait_idle()
            self._baseline = self.pruned_snapshot()
        return self._baseline


@contextmanager
def launch_app(data_dir: Path, work: Path, *, log_path: Path, threads: str | None = None,
               extra_args: tuple[str, ...] = ()) -> Iterator[AppProc]:
    """`python app.py` with the tiny checkpoints (PROC_MAX_ACTIVE slots + PROC_MAX_QUEUE queue), its
    TMPDIR, Gradio folder and voice cache under `work`, one torch thread unless told otherwise;
    stopped on exit. Not yet ready: see `wait_ready`."""
    port = free_port()
    env = app_env(port, work, threads=threads or os.environ.get("MOSS_TTS_NUM_THREADS", "1"))
    command = tiny_app_command(data_dir, "--max-active-streams", str(PROC_MAX_ACTIVE),
                               "--max-queue", str(PROC_MAX_QUEUE), *extra_args)
    with app_process(command, cwd=REPO_ROOT, env=env, log_path=log_path) as process:
        yield AppProc(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path,
                      tmp_dir=work / "tmp", cache_dir=work / "cache")


class PeakRss:
    """Samples a process's resident memory every 20 ms while a scenario runs (`with PeakRss(ps) as p:`)."""

    def __init__(self, process: psutil.Process):
        self.process = process
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def _run(self) -> None:
        while True:
            self.peak_bytes = max(self.peak_bytes, self.process.memory_info().rss)
            if self._stop.wait(0.02):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self.process.memory_info().rss)
