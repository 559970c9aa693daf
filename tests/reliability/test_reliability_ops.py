"""Operability: `/health` is 200 only when the model serves (503 JSON with Retry-After while it
loads or after it failed, as load balancers expect), and `/metrics` speaks the Prometheus text
format (parsed here with prometheus-client's own parser): streams, queue, TTFP and RTF
histograms, requests by outcome, and the guards' counters."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.reliability_common import run_coro

pytestmark = pytest.mark.slow


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_health_is_503_until_the_model_serves(data_dir) -> None:
    from studio.app import create_app
    from studio.service import SynthesizerService
    from studio.settings import ServerSettings
    from tts_core.errors import ModelLoadError

    release = threading.Event()

    def factory(report):
        report("loading model weights…")
        release.wait(60)
        raise ModelLoadError("could not load the model: the weights are not there")

    service = SynthesizerService(factory)
    app = create_app(service, ServerSettings())

    async def get(path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get(path)

    assert run_coro(get("/health")).status_code == 503  # not started yet
    service.start()
    loading = run_coro(get("/health"))
    assert loading.status_code == 503 and loading.json()["status"] == "loading", loading.text
    assert loading.headers["retry-after"] == "5" and loading.json()["message"]
    assert _value(_samples(run_coro(get("/metrics")).text), "tts_model_ready") == 0.0
    release.set()
    assert not service.wait(30)
    failed = run_coro(get("/health"))
    assert failed.status_code == 503 and failed.json()["status"] == "failed" and int(failed.headers["retry-after"]) >= 5
    assert "weights are not there" in failed.json()["error"]


def test_health_is_200_when_ready(inproc_client) -> None:
    r = inproc_client.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ready" and "active_streams" in r.json()


@pytest.mark.timeout(120)
def test_metrics_count_streams_latency_and_outcomes(inproc, inproc_client) -> None:
    before = _samples(inproc_client.get("/metrics").text)
    assert inproc_client.get("/metrics").headers["content-type"].startswith("text/plain")
    for name in ("tts_model_ready", "tts_active_streams", "tts_queued_requests", "tts_stream_slots",
                 "tts_queue_limit", "tts_http_connections_open", "tts_gradio_upload_files"):
        assert (name, ()) in before, name
    ok = inproc_client.post("/api/tts/stream", json={"text": "Counting.", "max_frames": 2})
    assert ok.status_code == 200 and ok.content
    assert inproc_client.post("/api/tts/stream", json={"text": ""}).status_code == 400
    too_big = inproc_client.post("/v1/audio/speech", content=b"{" + b" " * inproc.settings.body_limit_bytes,
                                 headers={"Content-Type": "application/json"})
    assert too_big.status_code == 413
    with inproc_client.stream("POST", "/api/tts/stream", json={"text": "Leaving early. " * 20}) as r:
        next(r.iter_raw())  # then hang up mid-stream
    deadline = time.monotonic() + 30
    while True:
        after = _samples(inproc_client.get("/metrics").text)
        cancelled = _value(after, "tts_streams_total", outcome="cancelled") - _value(before, "tts_streams_total",
                                                                                      outcome="cancelled")
        if cancelled >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert cancelled >= 1
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    assert delta[("tts_streams_total", (("outcome", "done"),))] >= 1
    assert delta[("tts_time_to_first_audio_seconds_count", ())] >= 2
    assert delta[("tts_real_time_factor_count", ())] >= 1
    assert delta[("tts_http_requests_total", (("outcome", "ok"), ("route", "stream")))] >= 1
    assert delta[("tts_http_requests_total", (("outcome", "client_error"), ("route", "stream")))] == 1
    assert delta[("tts_http_requests_total", (("outcome", "too_large"), ("route", "speech")))] == 1
    assert delta[("tts_http_bodies_too_large_total", ())] == 1
    assert after[("tts_active_streams", ())] >= 0 and after[("tts_model_ready", ())] == 1.0


@pytest.mark.timeout(120)
def test_metrics_count_encode_time_bytes_and_delivered_rtf_by_format(inproc_client) -> None:
    before = _samples(inproc_client.get("/metrics").text)
    sent = {}
    for fmt, stream in (("mp3", True), ("opus", True), ("pcm", False)):
        body = {"model": "moss-tts-nano", "input": "Counting bytes.", "response_format": fmt, "max_frames": 6,
                "seed": 1, **({"stream_format": "audio"} if stream else {})}
        r = inproc_client.post("/v1/audio/speech", json=body)
        assert r.status_code == 200 and r.content
        sent[fmt] = len(r.content)
    after = _samples(inproc_client.get("/metrics").text)
    for fmt, size in sent.items():
        def delta(name, fmt=fmt):
            return _value(after, name, format=fmt) - _value(before, name, format=fmt)
        assert delta("tts_response_bytes_total") == size, fmt  # every byte the client got, counted
        assert delta("tts_audio_out_seconds_total") > 0, fmt
        assert delta("tts_delivered_real_time_factor_count") == 1, fmt
        assert delta("tts_encode_seconds_total") >= 0, fmt
    # mp3 costs CPU to encode; its counter moves (pcm's may round to zero)
    assert _value(after, "tts_encode_seconds_total", format="mp3") > _value(before, "tts_encode_seconds_total",
                                                                             format="mp3")


def test_a_stuck_device_turns_health_and_new_requests_into_503(data_dir, tmp_path) -> None:
    """The engine's step stops returning (a GPU that stopped finishing work): the stream in progress
    gets the stall error, `/health` answers 503 "failed" with the reason, and a new speech request
    gets 503 `engine_stalled` at once instead of waiting for ever."""
    from support.server_helpers import tiny_synthesizer_factory

    from studio.app import create_app
    from studio.service import SynthesizerService
    from studio.settings import ServerSettings
    from tts_core.config import EngineConfig
    from tts_core.errors import EngineStalledError
    from tts_core.types import SynthesisRequest

    service = SynthesizerService(tiny_synthesizer_factory(data_dir, tmp_path, EngineConfig(stall_timeout_s=0.5)))
    service.start(background=False)
    assert service.wait(0), service.error
    runner = service.get().engine.runner
    unstick = threading.Event()
    real_step = runner.step

    def stuck_step(slots):
        assert unstick.wait(60), "the test never released the stuck step"
        return real_step(slots)

    runner.step = stuck_step  # this runner's steps never return until the test says so
    app = create_app(service, ServerSettings())

    async def call(method: str, path: str, **kwargs) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.request(method, path, **kwargs)

    try:
        assert run_coro(call("GET", "/health")).status_code == 200
        before = _samples(run_coro(call("GET", "/metrics")).text)
        assert _value(before, "tts_engine_stalled") == 0.0 and _value(before, "tts_model_ready") == 1.0
        with pytest.raises(EngineStalledError, match="stopped responding"):
            next(service.get().stream(SynthesisRequest(text="Nobody hears this.", max_frames=8)))
        health = run_coro(call("GET", "/health"))
        assert health.status_code == 503 and health.json()["status"] == "failed", health.text
        assert "restarted" in health.json()["error"] and int(health.headers["retry-after"]) >= 5
        speech = run_coro(call("POST", "/v1/audio/speech", json={"model": "moss-tts-nano", "input": "Hello."}))
        assert speech.status_code == 503, speech.text
        assert speech.json()["error"]["code"] == "engine_stalled" and int(speech.headers["retry-after"]) >= 5
        metrics = _samples(run_coro(call("GET", "/metrics")).text)
        assert _value(metrics, "tts_engine_stalled") == 1.0 and _value(metrics, "tts_model_ready") == 0.0
    finally:
        unstick.set()
        service.close()
