"""`python app.py --encoder-processes 1`: mp3 streams encoded in a worker process, through real
sockets; a worker killed mid-stream ends that stream only, and the server goes on serving."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import psutil
import pytest
from support.e2e_helpers import free_port
from support.replica_helpers import ReplicaApp, start_replica
from support.server_helpers import wait_until_ready
from support.stream_decoding import decode_progressively

WORKER_MODULE = "tts_core.audio.encoder_worker"
TEXT = "The encoder runs in a process of its own, and the listeners hear the same stream."
WAIT_S = 60.0  # a bound on waiting for the server's state to change, not a measured timing


@pytest.fixture(scope="module")
def pooled_app(data_dir, tmp_path_factory):
    work = tmp_path_factory.mktemp("encoder-pool-app")
    port = free_port()
    with start_replica(data_dir, work / "cache", work / "app.log", port, "--no-ui", "--encoder-processes", "1") as process:
        app = ReplicaApp(process, f"http://127.0.0.1:{port}", work / "app.log")
        wait_until_ready(app, 150)
        yield app


def _workers(app: ReplicaApp) -> list[psutil.Process]:
    return [child for child in psutil.Process(app.process.pid).children()
            if WORKER_MODULE in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE]


def _metric(app: ReplicaApp, name: str) -> float:
    for line in httpx.get(app.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def _speech(app: ReplicaApp, fmt: str, seed: int, frames: int) -> bytes:
    body = {"model": "moss-tts-nano", "input": TEXT, "voice": "alloy", "response_format": fmt, "stream": True,
            "seed": seed, "max_frames": frames}
    with httpx.stream("POST", app.url + "/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return b"".join(response.iter_bytes())


def _until(check, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_health_and_metrics_show_the_pool(pooled_app):
    assert pooled_app.health()["encoder_processes"] == 1
    assert len(_workers(pooled_app)) == 1
    assert _metric(pooled_app, "tts_encoder_processes") == 1


def test_concurrent_mp3_streams_decode_to_the_pcm_audio(pooled_app):
    frames = 25
    with ThreadPoolExecutor(4) as clients:
        mp3s = list(clients.map(lambda seed: _speech(pooled_app, "mp3", seed, frames), range(4)))
    pcm = _speech(pooled_app, "pcm", 0, frames)  # 48 kHz stereo s16: seed 0's audio, unencoded
    reference = np.frombuffer(pcm, "<i2").astype(np.float32) / 32767
    for data in mp3s:
        decoded = decode_progressively("mp3", [data])
        assert decoded.rate == 48_000 and decoded.channels == 2
        assert decoded.pcm.size and np.isfinite(decoded.pcm).all()
    audio = decode_progressively("mp3", [mp3s[0]]).pcm
    # LAME's priming and the last frame's padding stay in a streamed mp3: a few codec frames at most.
    assert abs(audio.shape[1] - reference.size // 2) <= 3 * 1152
    # The same signal's loudness (the tiny model babbles loudly; mp3 may overshoot full scale a little)
    rms, reference_rms = float(np.sqrt(np.mean(audio**2))), float(np.sqrt(np.mean(reference**2)))
    assert reference_rms > 0 and abs(rms - reference_rms) <= 0.2 * reference_rms
    _until(lambda: _metric(pooled_app, "tts_encoder_streams") == 0, "pooled streams still open")


def test_a_killed_worker_ends_its_stream_and_the_server_goes_on(pooled_app):
    restarts = _metric(pooled_app, "tts_encoder_worker_restarts_total")
    (worker,) = _workers(pooled_app)
    body = {"model": "moss-tts-nano", "input": TEXT * 4, "voice": "alloy", "response_format": "mp3", "stream": True,
            "seed": 7, "max_frames": 1500}
    outcome: dict = {}
    first_bytes = threading.Event()

    def listen() -> None:
        received = 0
        try:
            with httpx.stream("POST", pooled_app.url + "/v1/audio/speech", json=body, timeout=120) as response:
                for piece in response.iter_bytes():
                    received += len(piece)
                    first_bytes.set()
            outcome["ended"] = "complete"
        except httpx.HTTPError as exc:  # the connection was aborted: the client sees a broken stream
            outcome["ended"] = type(exc).__name__
        finally:
            outcome["bytes"] = received
            first_bytes.set()

    listener = threading.Thread(target=listen)
    listener.start()
    assert first_bytes.wait(WAIT_S)
    worker.kill()
    listener.join(WAIT_S)
    assert not listener.is_alive()
    assert outcome["ended"] != "complete", outcome
    assert outcome["bytes"] > 0
    # The pool started a new worker; mp3 and pcm streams are served as before.
    _until(lambda: _metric(pooled_app, "tts_encoder_worker_restarts_total") == restarts + 1, "no restart counted")
    _until(lambda: len(_workers(pooled_app)) == 1, "no new worker")
    assert _workers(pooled_app)[0].pid != worker.pid
    assert decode_progressively("mp3", [_speech(pooled_app, "mp3", 3, 10)]).pcm.size
    assert len(_speech(pooled_app, "pcm", 3, 10)) > 0
    assert pooled_app.health()["status"] == "ready"
    _until(lambda: _metric(pooled_app, "tts_encoder_streams") == 0, "pooled streams still open")


def test_shutdown_stops_the_workers(data_dir, tmp_path):
    port = free_port()
    with start_replica(data_dir, tmp_path / "cache", tmp_path / "app.log", port, "--no-ui",
                       "--encoder-processes", "2") as process:
        app = ReplicaApp(process, f"http://127.0.0.1:{port}", tmp_path / "app.log")
        _until(lambda: len(_workers(app)) == 2, "the workers did not start")
        workers = _workers(app)
    # start_replica's exit terminated the server (SIGTERM, as a process manager stops it)
    assert process.returncode is not None
    _gone, alive = psutil.wait_procs(workers, timeout=WAIT_S)
    assert not alive, alive
