"""Servers the tests run: uvicorn in a thread, or `python app.py` as a subprocess."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import httpx
import pytest
import uvicorn


def tiny_synthesizer_factory(data_dir: Path, cache_dir: Path, engine_config=None, *, warmup: bool = False):
    """A `SynthesizerService` factory over the tiny parity checkpoints: CPU, the shared data's
    tokenizer and preset clips, voice codes cached in `cache_dir`, no downloads; 4 stream slots
    unless `engine_config` says otherwise (not the machine's core count)."""

    def factory(report):
        from tts_core.config import EngineConfig
        from tts_core.synthesizer import Synthesizer

        parity = data_dir / "parity"
        return Synthesizer.from_pretrained(
            str(parity / "tiny_lm"), str(parity / "tiny_codec"), device="cpu",
            tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
            voices_dir=str(data_dir / "presets"), cache_dir=cache_dir, allow_download=False, warmup=warmup,
            report=report, engine_config=engine_config or EngineConfig(max_active_streams=4),
        )

    return factory


class ServerThread:
    """uvicorn serving `app` on a free port of 127.0.0.1 in a daemon thread."""

    def __init__(self, app):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(self.config(app))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def config(self, app) -> uvicorn.Config:
        return uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self._thread.join(15)
        self._sock.close()


class _AppLike(Protocol):
    process: subprocess.Popen
    url: str

    def health(self) -> dict: ...

    def log_tail(self, num_chars: int = 4000) -> str: ...


@contextmanager
def app_process(command: list[str], *, cwd: Path, env: dict, log_path: Path) -> Iterator[subprocess.Popen]:
    """Start `python app.py ...` with its output in `log_path`; terminate it on exit."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen, timeout_s: float = 15) -> None:
    """Terminate `process`, and kill it when it has not exited within `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_until_ready(server: _AppLike, timeout_s: float) -> None:
    """Poll /health until the model is ready and the page served (app.py builds it once the model
    is ready, `studio/page_slot.py`); fail with the app's log when it exits or fails."""
    deadline = time.monotonic() + timeout_s
    status = "no answer"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"app.py exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            health = server.health()
            status = health.get("status")
            if status == "ready" and health.get("page") == "failed":
                pytest.fail(f"the page failed to build:\n{server.log_tail()}")
            if status == "ready" and health.get("page") != "building":
                return
            if status == "failed":
                pytest.fail(f"model failed to load: {health.get('error')}\n{server.log_tail()}")
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    pytest.fail(f"app not ready after {timeout_s} s (last status: {status}):\n{server.log_tail()}")


def wait_for_idle(health: Callable[[], dict], timeout_s: float) -> dict:
    """Poll `health()` until no stream is active or queued; returns the last health."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = health()
        if current["active_streams"] == 0 and current["queued"] == 0:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"engine still busy after {timeout_s} s: {current}")
        time.sleep(0.05)
