"""Replicas for the tests: `python app.py` processes sharing one cache folder, and nginx in front of
them, configured from docs/nginx-replicas.conf (the documented recipe, run as written)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from support.e2e_helpers import REQUIRE_BROWSER
from support.server_helpers import app_process, stop_process
from tts_core.env import env_flag

REPO_ROOT = Path(__file__).resolve().parents[2]
NGINX_RECIPE = REPO_ROOT / "docs" / "nginx-replicas.conf"


class ReplicaApp:
    """One running `python app.py`: its process, URL and log (what `wait_until_ready` reads)."""

    def __init__(self, process: subprocess.Popen, url: str, log_path: Path):
        self.process, self.url, self.log_path = process, url, log_path

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()

    def log_tail(self, num_chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-num_chars:]


def start_replica(data_dir: Path, cache_dir: Path, log_path: Path, port: int, *extra: str):
    """`python app.py` (tiny checkpoints) on `port` with `cache_dir` as its cache (MOSS_TTS_CACHE_DIR)."""
    env = {**os.environ, "PORT": str(port), "MOSS_TTS_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", "MOSS_TTS_NUM_THREADS": "1"}
    env.pop("SPACE_ID", None)
    command = [sys.executable, "app.py", "--lm", str(data_dir / "parity" / "tiny_lm"),
               "--codec", str(data_dir / "parity" / "tiny_codec"),
               "--tokenizer", str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
               "--voices-dir", str(data_dir / "presets"), *extra]
    return app_process(command, cwd=REPO_ROOT, env=env, log_path=log_path)


def nginx_unavailable(reason: str) -> None:
    """Skip, or fail when CI requires every test to run (MOSS_TTS_REQUIRE_BROWSER, as for chromium)."""
    if env_flag(REQUIRE_BROWSER):
        pytest.fail(f"{reason}; {REQUIRE_BROWSER} is set, so the nginx tests must run, not skip", pytrace=False)
    pytest.skip(reason)


def find_nginx() -> str:
    """The nginx binary; installed from the Debian package when missing and we are root."""
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if found is None and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "nginx"], env=env, capture_output=True, timeout=900)
        found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        nginx_unavailable("nginx is not installed (apt-get install nginx; scripts/test.sh does it as root)")
    return found  # type: ignore[return-value]


def nginx_config(prefix: Path, listen: str, replicas: tuple[str, str]) -> str:
    """docs/nginx-replicas.conf with its placeholders filled in."""
    user = "user root;" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""  # workers must reach `prefix`
    return (NGINX_RECIPE.read_text().replace("@USER@", user).replace("@PREFIX@", str(prefix))
            .replace("@LISTEN@", listen).replace("@REPLICA_A@", replicas[0]).replace("@REPLICA_B@", replicas[1]))


@contextmanager
def nginx_proxy(prefix: Path, port: int, replicas: tuple[str, str]) -> Iterator[str]:
    """nginx on 127.0.0.1:`port` in front of `replicas` ("host:port"); yields its URL, once it answers."""
    binary = find_nginx()
    prefix.mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx-replicas.conf"
    conf.write_text(nginx_config(prefix, f"127.0.0.1:{port}", replicas))
    log = open(prefix / "nginx.out", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen([binary, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"nginx exited: {(prefix / 'nginx.out').read_text(errors='replace')[-2000:]}")
            try:
                httpx.get(url + "/health", timeout=5)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        stop_process(process)
        log.close()
