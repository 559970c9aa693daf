"""Servers the tests run: uvicorn in a thread, or `python app.py` as a subprocess (launched and
watched by `bench.lib.app`, which the benches share)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

# The launcher is bench.lib.app's (the benches share it); the tests take these names from here.
from bench.lib.app import AppFailed, AppLike, app_process, free_port, stop_process, wait_ready  # noqa: F401
from bench.lib.app import wait_idle as wait_for_idle  # noqa: F401


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


@contextlib.contextmanager
def tiny_api_server(data_dir: Path, cache_dir: Path, engine_config=None) -> Iterator[str]:
    """The app without its page (`page="off"`) over the tiny checkpoints, loaded before it serves,
    in a `ServerThread`; yields its URL, then stops the server and the model."""
    from studio.app import create_app
    from studio.service import SynthesizerService
    from studio.settings import ServerSettings

    service = SynthesizerService(tiny_synthesizer_factory(data_dir, cache_dir, engine_config))
    service.start(background=False)
    try:
        assert service.wait(0), f"tiny model failed to load: {service.error}"
        with ServerThread(create_app(service, ServerSettings(), page="off")) as server:
            yield server.url
    finally:
        service.close()


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


def wait_until_ready(server: AppLike, timeout_s: float) -> None:
    """`bench.lib.app.wait_ready`, failing the test (with the app's log) instead of raising."""
    try:
        wait_ready(server, timeout_s)
    except AppFailed as exc:
        pytest.fail(str(exc), pytrace=False)
