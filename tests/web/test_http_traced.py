"""bench/http/traced.py: app.py run through the traced launcher (a real process, tiny checkpoints,
real sockets) answers the timeline of a window: every request of it, its phases in order, the event
loop's lag and the engine's own trace. No timing is asserted: only what was recorded and its order."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from bench.http.clients import MODEL
from bench.http.server import ModelFiles, serve
from bench.http.traced import ask

PHASES = ("submitted_after_entered_ms", "engine_first_audio_after_submitted_ms",
          "first_chunk_ready_after_first_audio_ms", "first_bytes_after_first_ready_ms", "first_bytes_after_entered_ms")


@pytest.fixture(scope="module")
def app(data_dir: Path, tmp_path_factory):
    with serve(ModelFiles.tiny(data_dir), tmp_path_factory.mktemp("traced"), max_streams=4, threads="1", cpus=None,
               extra_args=("--device", "cpu", "--no-ui"), launcher=("-m", "bench.http.traced", "--")) as served:
        served.wait_ready(300)
        yield served


def _speak(url: str, fmt: str) -> bytes:
    body = {"model": MODEL, "input": "A traced request.", "voice": "alloy", "response_format": fmt,
            "stream_format": "audio", "max_frames": 6}
    with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as reply:
        assert reply.status_code == 200, reply.read()
        return reply.read()


def test_a_window_gets_its_requests_phases_loop_lag_and_engine_trace(app) -> None:
    _speak(app.url, "pcm")  # before the window: not counted
    start = time.perf_counter()
    for fmt in ("pcm", "mp3"):
        assert _speak(app.url, fmt)
    end = time.perf_counter()
    got = ask(app.url, start, end)
    assert "error" not in got, got
    assert got["requests"] == 2
    for phase in PHASES:
        assert got[phase]["count"] == 2 and got[phase]["p50"] >= 0, (phase, got[phase])
    assert got["first_bytes_after_entered_ms"]["max"] >= got["submitted_after_entered_ms"]["max"]
    assert got["loop_lag_ms"]["count"] > 0
    engine = got["engine"]
    assert sum(n for _, n in engine["admissions_ms_count"]) == 2
    assert engine["host"]["engine"]["step"]["count"] > 0  # the CPU runner: whole steps
    # The window was cleared with the answer: the next one starts empty.
    assert ask(app.url, end, time.perf_counter())["requests"] == 0
