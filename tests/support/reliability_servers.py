"""Servers of the reliability tests and figures: `python app.py` in its own process (`launch_app`,
`AppProc`: measured from outside with psutil), and in-process servers built the way app.py builds
its server (`GuardedServer`: create_app under uvicorn with the guarded protocol), there with limits
small enough to test (a cap of a few dozen connections, deadlines of a second or two)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import psutil
import uvicorn

from studio.limits.connections import uvicorn_config
from studio.settings import ServerSettings
from support.reliability_common import INPROC_MAX_TEXT, PROC_MAX_ACTIVE, PROC_MAX_QUEUE, REPO_ROOT
from support.server_helpers import ServerThread, app_process, tiny_synthesizer_factory, wait_for_idle


def tiny_service(data_dir: Path, cache_dir: Path, *, max_active: int = 2, max_queue: int = 4):
    """A loaded SynthesizerService over the tiny parity checkpoints (loaded in this thread)."""
    from studio.service import SynthesizerService
    from tts_core.config import EngineConfig

    factory = tiny_synthesizer_factory(data_dir, cache_dir, EngineConfig(
        max_active_streams=max_active, max_queue=max_queue, max_text_chars=INPROC_MAX_TEXT))
    service = SynthesizerService(factory)
    service.start(background=False)
    assert service.wait(0), f"tiny model failed to load: {service.error}"
    return service


class GuardedServer(ServerThread):
    """`app` served by uvicorn through `GuardedH11Protocol` on a free 127.0.0.1 port, in a thread,
    with the connection limits of `settings`."""

    def __init__(self, app, settings: ServerSettings):
        self.settings = settings
        super().__init__(app)

    def config(self, app) -> uvicorn.Config:
        return uvicorn_config(app, replace(self.settings, host="127.0.0.1", port=self.port),
                              counters=app.state.guard_counters, log_level="warning", lifespan="on",
                              timeout_graceful_shutdown=2)


# ---- python app.py ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class AppProc:
    url: str
    process: subprocess.Popen
    log_path: Path
    tmp_dir: Path  # TMPDIR and GRADIO_TEMP_DIR of the app: must stay empty of our requests' files
    cache_dir: Path
    _baseline: dict | None = None

    @property
    def ps(self) -> psutil.Process:
        return psutil.Process(self.process.pid)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()

    def log_tail(self, num_chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-num_chars:]

    def snapshot(self) -> dict:
        """Resident memory (MiB), threads, open file descriptors, files under the temp dirs."""
        ps = self.ps
        return {"rss_mib": round(ps.memory_info().rss / 2**20, 1), "threads": ps.num_threads(),
                "fds": ps.num_fds(), "tmp_files": sum(1 for p in self.tmp_dir.rglob("*") if p.is_file())}

    def wait_idle(self, timeout_s: float = 20.0) -> dict:
        return wait_for_idle(self.health, timeout_s)

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
    TMPDIR, Gradio folder and voice cache under `work`; terminated on exit (not yet ready: see
    `server_helpers.wait_until_ready`)."""
    port = free_port()
    tmp_dir, cache_dir = work / "tmp", work / "cache"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ, "PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "MOSS_TTS_CACHE_DIR": str(cache_dir), "PYTHONUNBUFFERED": "1",
        "TMPDIR": str(tmp_dir), "GRADIO_TEMP_DIR": str(tmp_dir / "gradio"),
        "MOSS_TTS_NUM_THREADS": threads or os.environ.get("MOSS_TTS_NUM_THREADS", "1"),
    }
    for name in ("SPACE_ID", "MOSS_TTS_ALLOW_REMOTE_AUDIO", "MOSS_TTS_MAX_ACTIVE", "MOSS_TTS_MAX_QUEUE"):
        env.pop(name, None)
    command = [
        sys.executable, "app.py",
        "--lm", str(data_dir / "parity" / "tiny_lm"), "--codec", str(data_dir / "parity" / "tiny_codec"),
        "--tokenizer", str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
        "--voices-dir", str(data_dir / "presets"),
        "--max-active-streams", str(PROC_MAX_ACTIVE), "--max-queue", str(PROC_MAX_QUEUE), *extra_args,
    ]
    with app_process(command, cwd=REPO_ROOT, env=env, log_path=log_path) as process:
        yield AppProc(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path, tmp_dir=tmp_dir,
                      cache_dir=cache_dir)
