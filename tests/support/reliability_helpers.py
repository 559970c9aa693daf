"""Fixtures of the reliability and fuzz tests (loaded with `pytest_plugins = ["support.reliability_helpers"]`).

Two real servers, both on 127.0.0.1 only, both running the tiny parity checkpoints:

- `app_proc`: `python app.py` as a user starts it, in its own process (so its resident memory,
  threads and open files can be measured from outside), 4 streams + a queue of 12;
- `inproc`: `create_app(...)` under uvicorn in a thread of the test process, with settings the
  command line cannot give: small upload limits, remote `ref_audio` enabled for one exempt
  127.0.0.1 port (a local file server), a 2 s fetch deadline. Gradio's upload folder of the test
  process is a session temporary folder (`gradio_dir`), so its content can be checked.

`figures` collects what the tests measured; at the end of the session it is written to
test-artifacts/reliability.json (docs/RELIABILITY.md quotes the last full run).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from bench.lib.app import AppProc, launch_app
from support.reliability_common import (
    ARTIFACTS,
    INPROC_FETCH_TIMEOUT_S,
    INPROC_MAX_REF_S,
    INPROC_MAX_TEXT,
    INPROC_MAX_UPLOAD,
    wav_bytes,
)
from support.server_helpers import ServerThread, wait_until_ready

STARTUP_TIMEOUT_S = 150


# ---- figures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def figures() -> Iterator[dict]:
    """Numbers measured by the tests, written to test-artifacts/reliability.json at the end."""
    data: dict = {}
    yield data
    if data:
        ARTIFACTS.mkdir(exist_ok=True)
        data["written_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        (ARTIFACTS / "reliability.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


# ---- audio ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def clip_wav(data_dir: Path) -> bytes:
    """A valid 1.5 s reference clip cut from a preset: mono 24 kHz 16-bit WAV (~70 KiB)."""
    audio, sr = sf.read(data_dir / "presets" / "en_2.wav", dtype="float32", always_2d=True)
    start = int(0.5 * sr)
    clip = audio[start : start + int(1.5 * sr)].mean(axis=1)[::2]
    return wav_bytes(clip, sr // 2)


# ---- in-process server ------------------------------------------------------------------------


@dataclass
class FileServer:
    """A local http server standing in for "the internet" in remote ref_audio tests.

    Paths: /clip.wav (a valid clip), /big (over the limit, with Content-Length), /big-chunked
    (over the limit, no Content-Length), /slow (headers, then nothing), /missing (404),
    /redirect?to=URL (302). Every request path is recorded in `hits`.
    """

    clip: bytes
    limit: int
    hits: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _file_handler(files: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            files.hits.append(self.path)
            path, _, query = self.path.partition("?")
            if path == "/clip.wav":
                self._send(200, files.clip, {"Content-Type": "audio/wav"})
            elif path == "/big":
                self._send(200, b"\0" * (files.limit + 1))
            elif path == "/big-chunked":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                block = b"\0" * 65536
                try:
                    for _ in range(files.limit // len(block) + 2):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
            elif path == "/slow":
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                time.sleep(INPROC_FETCH_TIMEOUT_S + 2)
            elif path == "/redirect":
                self._send(302, b"", {"Location": query.removeprefix("to=")})
            else:
                self._send(404, b"not here")

    return Handler


@pytest.fixture(scope="session")
def file_server(clip_wav: bytes) -> Iterator[FileServer]:
    files = FileServer(clip=clip_wav, limit=INPROC_MAX_UPLOAD)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _file_handler(files))
    httpd.daemon_threads = True
    files.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield files
    httpd.shutdown()
    httpd.server_close()


@dataclass
class InProc:
    url: str
    service: object
    settings: object
    app: object

    @property
    def synth(self):
        return self.service.get()


def inproc_settings(data_dir: Path, file_port: int):
    from studio.settings import ServerSettings

    return ServerSettings(
        max_text_chars=INPROC_MAX_TEXT, max_upload_bytes=INPROC_MAX_UPLOAD, max_ref_audio_s=INPROC_MAX_REF_S,
        allow_remote_audio=True, remote_audio_timeout_s=INPROC_FETCH_TIMEOUT_S,
        remote_audio_allow_hosts=(f"127.0.0.1:{file_port}",),
        lm_id=str(data_dir / "parity" / "tiny_lm"), codec_id=str(data_dir / "parity" / "tiny_codec"),
    )


def ensure_guards(app, settings) -> None:
    """The body-limit and CORS middlewares, unless create_app already installed them."""
    from studio.limits.guards import BodyLimitMiddleware, install_http_guards

    if not any(m.cls is BodyLimitMiddleware for m in app.user_middleware):
        install_http_guards(app, settings)


@pytest.fixture(scope="session")
def gradio_dir(tmp_path_factory) -> Path:
    """Gradio's upload folder in this test process (GRADIO_TEMP_DIR, read by Gradio at run time)."""
    folder = os.environ.get("GRADIO_TEMP_DIR")
    if not folder:
        folder = str(tmp_path_factory.mktemp("gradio_uploads"))
        os.environ["GRADIO_TEMP_DIR"] = folder  # for the whole session: apps keep the folder they started with
    return Path(os.path.realpath(folder))


@pytest.fixture(scope="session")
def inproc(data_dir: Path, tmp_path_factory, file_server: FileServer, gradio_dir: Path) -> Iterator[InProc]:
    from studio.app import create_app
    from support.reliability_servers import tiny_service

    service = tiny_service(data_dir, tmp_path_factory.mktemp("inproc_voice_cache"))
    settings = inproc_settings(data_dir, file_server.port)
    app = create_app(service, settings)
    ensure_guards(app, settings)
    try:
        with ServerThread(app) as server:
            yield InProc(url=server.url, service=service, settings=settings, app=app)
    finally:
        service.close()


@pytest.fixture(scope="session")
def inproc_client(inproc: InProc) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=inproc.url, timeout=60) as client:
        yield client


# ---- python app.py ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def app_proc(data_dir: Path, tmp_path_factory) -> Iterator[AppProc]:
    ARTIFACTS.mkdir(exist_ok=True)
    with launch_app(data_dir, tmp_path_factory.mktemp("app"), log_path=ARTIFACTS / "reliability_app.log") as proc:
        wait_until_ready(proc, STARTUP_TIMEOUT_S)
        yield proc
