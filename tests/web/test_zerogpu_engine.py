"""ZeroGPU mode without Spaces: the page's GPU path (prepare on the server's CPU, generate in a forked
worker with the server's own engine, relay messages for the page) gives exactly the audio of the
in-process engine, and the server process never initialises CUDA."""

from __future__ import annotations

import base64
import json
import os
import sys
import types

import numpy as np
import pytest
import torch

from studio.api.requests import UploadStore
from studio.service import SynthesizerService
from studio.settings import ServerSettings
from studio.zerogpu import worker as zerogpu
from studio.zerogpu.harness import GPU, parent_cuda_initialized, set_quota
from studio.zerogpu.quota import QuotaLedger, QuotaPolicy, Visitor
from studio.zerogpu.relay import PageRelay
from studio.zerogpu.worker import (
    GPU_MAX_S,
    GPU_MIN_S,
    gpu_decorator,
    gpu_seconds,
    load_gpu_weights,
    make_gpu_stream,
    place_weights,
)
from tts_core import SynthesisRequest, Synthesizer
from tts_core.config import EngineConfig

REQUEST = dict(text="Hello there, this is a test of the worker.", seed=3, max_frames=12)


@pytest.fixture(scope="module")
def tiny(data_dir):
    parity = data_dir / "parity"
    synth = Synthesizer.from_pretrained(
        str(parity / "tiny_lm"), str(parity / "tiny_codec"), device="cpu",
        tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"), voices_dir=data_dir / "presets",
        engine_config=EngineConfig(max_active_streams=2), warmup=False, allow_download=False)
    # the documented placement: "on cuda" in the server process, moved in the worker
    weights = place_weights(load_gpu_weights(parity / "tiny_lm", parity / "tiny_codec"), "harness")
    stream = make_gpu_stream(lambda: weights, GPU)
    yield synth, stream
    stream.close_workers()
    synth.close()


def _pcm(chunks) -> np.ndarray:
    return np.concatenate([c.pcm for c in chunks], axis=1)


def _codes(chunks) -> np.ndarray:
    return np.concatenate([c.codes for c in chunks if len(c.codes)])


def assert_same_audio(pcm: np.ndarray, expected: np.ndarray) -> None:
    """Same samples up to float rounding: the worker's engine runs on one CPU thread, the server's on
    as many as it was given, and a matrix product split over other threads rounds differently."""
    assert pcm.shape == expected.shape
    np.testing.assert_allclose(pcm, expected, rtol=0, atol=1e-4)


def test_worker_generates_exactly_what_the_server_engine_generates(tiny):
    synth, stream = tiny
    torch.set_num_threads(2)
    torch.ones(256, 256) @ torch.ones(256, 256)  # the server used its OpenMP team before the fork
    torch.set_num_threads(1)
    chunks = list(stream(synth.build(SynthesisRequest(**REQUEST))))
    reference = list(synth.stream(SynthesisRequest(**REQUEST)))
    expected = _pcm(reference)
    assert chunks[-1].is_last
    np.testing.assert_array_equal(_codes(chunks), _codes(reference))  # the same codes, bit for bit
    assert_same_audio(_pcm(chunks), expected)
    assert chunks[-1].timings.first_audio_s is not None and chunks[-1].timings.audio_s == expected.shape[1] / 48_000
    assert stream.calls[-1].worker_pid != os.getpid()
    assert parent_cuda_initialized() is False and torch.cuda.is_initialized() is False


def test_closing_the_stream_cancels_the_job_and_the_worker_serves_the_next(tiny):
    synth, stream = tiny
    long = SynthesisRequest(text=" ".join(["A long sentence that keeps the stream going."] * 20), seed=1)
    calls = stream(synth.build(long))
    next(calls)
    calls.close()
    again = list(stream(synth.build(SynthesisRequest(**REQUEST))))
    np.testing.assert_array_equal(_codes(again), _codes(synth.stream(SynthesisRequest(**REQUEST))))


def test_gpu_seconds_follow_the_text_within_bounds(tiny):
    synth, _ = tiny
    short = gpu_seconds(synth.build(SynthesisRequest(text="Hi.")))
    long = gpu_seconds(synth.build(SynthesisRequest(text=" ".join(["Many more words to say here."] * 60))))
    assert GPU_MIN_S <= short < long <= GPU_MAX_S


def test_spaces_gpu_is_used_only_on_zerogpu_hardware(monkeypatch):
    fake_spaces = types.ModuleType("spaces")  # the real package is not installed here

    def fake_gpu(*args, **kwargs):
        raise AssertionError("not called by the selection itself")

    fake_spaces.GPU = fake_gpu
    monkeypatch.setitem(sys.modules, "spaces", fake_spaces)
    monkeypatch.delenv(zerogpu.ZEROGPU_ENV, raising=False)
    assert gpu_decorator() == (GPU, "harness")
    monkeypatch.setenv(zerogpu.ZEROGPU_ENV, "true")
    assert gpu_decorator() == (fake_gpu, "spaces")
    monkeypatch.delitem(sys.modules, "spaces")
    monkeypatch.setattr("builtins.__import__", _refuse("spaces"))
    assert gpu_decorator() == (GPU, "harness")  # SPACES_ZERO_GPU without the package: the harness


def _refuse(name):
    real = __import__

    def importer(module, *args, **kwargs):
        if module == name:
            raise ImportError(f"no module named {name}")
        return real(module, *args, **kwargs)

    return importer


class _Mode:
    """What `PageRelay` needs of `ZeroGPUMode`: the decorated stream (here over the harness)."""

    def __init__(self, stream):
        self.stream = stream
        self.concurrency = 2
        self.gpu_seconds = gpu_seconds


def _relay(tiny) -> PageRelay:
    synth, stream = tiny
    service = SynthesizerService(lambda report: synth)
    service.start(background=False)
    return PageRelay(_Mode(stream), service, ServerSettings(), UploadStore(max_total_bytes=1 << 20))


def test_page_relay_numbers_its_messages_and_carries_the_exact_samples(tiny):
    synth, _ = tiny
    payload = {"items": [{"label": "A", "request": {**REQUEST, "voice": None}},
                         {"label": "B", "request": {**REQUEST, "seed": 4}}]}
    messages = [json.loads(m) for m in _relay(tiny).relay(json.dumps(payload))]
    assert [m["n"] for m in messages] == list(range(len(messages)))
    assert len({m["relay"] for m in messages}) == 1
    request_ids = list(dict.fromkeys(m["requestId"] for m in messages))
    assert len(request_ids) == 2
    for index, label in enumerate("AB"):
        mine = [m for m in messages if m["requestId"] == request_ids[index]]
        kinds = [m["type"] for m in mine]
        assert kinds[0] == "start" and kinds[-1] == "end" and set(kinds[1:-1]) == {"pcm"}
        start = mine[0]
        assert (start["label"], start["item"], start["items"], start["sampleRate"], start["channels"]) == (
            label, index, 2, 48_000, 2)
        assert start["estimatedDuration"] > 0
        assert start["gpuSeconds"] == gpu_seconds(synth.build(SynthesisRequest(**{**REQUEST, "seed": 3 + index})))
        pcm = np.concatenate([np.frombuffer(base64.b64decode(m["pcm"]), "<f4") for m in mine if m["type"] == "pcm"])
        request = SynthesisRequest(**{**REQUEST, "seed": 3 if index == 0 else 4})
        expected = _pcm(synth.stream(request))
        assert_same_audio(pcm.reshape(-1, 2).T, expected)
        assert mine[-1]["audioSeconds"] == pytest.approx(expected.shape[1] / 48_000)


def test_page_relay_reports_a_bad_request_as_an_error_message(tiny):
    messages = [json.loads(m) for m in _relay(tiny).relay(json.dumps({"items": [
        {"label": "x", "request": {"text": "Hi", "voice": "No Such Voice"}}]}))]
    assert [m["type"] for m in messages] == ["error"]
    assert "No Such Voice" in messages[0]["message"]
    assert list(_relay(tiny).relay("")) == []


def test_page_relay_offers_the_cpu_engine_when_the_quota_is_out(tiny):
    _, stream = tiny
    visitor = Visitor("page-visitor", "anonymous")
    ledger = QuotaLedger(QuotaPolicy(daily_s={"anonymous": 10}))  # less than the shortest call asks
    set_quota(ledger)
    try:
        payload = {"items": [{"label": "A", "request": REQUEST}, {"label": "B", "request": {**REQUEST, "seed": 4}}]}
        calls = len(stream.calls)
        messages = [json.loads(m) for m in _relay(tiny).relay(json.dumps(payload), visitor)]
    finally:
        set_quota(None)
    assert [m["type"] for m in messages] == ["start", "unavailable"]
    start, out = messages
    assert start["gpuSeconds"] >= GPU_MIN_S > ledger.left_s(visitor)
    assert out["reason"] == "quota" and out["message"].startswith("Your ZeroGPU quota for today is used up.")
    assert f"({start['gpuSeconds']}s requested vs. 10s left)" in out["message"]
    assert json.loads(out["fallback"]) == payload and out["item"] == 0  # both items, for the CPU engine
    assert len(stream.calls) == calls, "the refused call never reached a worker"


def test_a_comparison_whose_second_call_is_refused_plays_the_first_and_offers_the_rest(tiny):
    _, stream = tiny
    visitor = Visitor("comparing-visitor", "anonymous")
    # Room for one call's reservation (charged whole), not two.
    set_quota(QuotaLedger(QuotaPolicy(daily_s={"anonymous": GPU_MIN_S + 5}, charge="requested")))
    try:
        payload = {"items": [{"label": "A", "request": REQUEST}, {"label": "B", "request": {**REQUEST, "seed": 4}}]}
        messages = [json.loads(m) for m in _relay(tiny).relay(json.dumps(payload), visitor)]
    finally:
        set_quota(None)
    kinds = [m["type"] for m in messages]
    assert kinds[0] == "start" and "pcm" in kinds and kinds[-3:] == ["end", "start", "unavailable"]
    out = messages[-1]
    assert out["item"] == 1 and json.loads(out["fallback"]) == {"items": payload["items"][1:]}
    assert stream.usage[-1].visitor == visitor and stream.usage[-1].charged_s == GPU_MIN_S


def test_page_relay_offers_the_cpu_engine_when_the_gpu_copy_is_missing(tiny):
    synth, _ = tiny

    def not_loaded():
        from tts_core.errors import TTSError

        raise TTSError("the GPU copy of the model is not loaded yet; try again in a few seconds")

    stream = make_gpu_stream(not_loaded, GPU)
    service = SynthesizerService(lambda report: synth)
    service.start(background=False)
    relay = PageRelay(_Mode(stream), service, ServerSettings(), UploadStore(max_total_bytes=1 << 20))
    try:
        messages = [json.loads(m) for m in relay.relay(json.dumps({"items": [{"label": "A", "request": REQUEST}]}))]
    finally:
        stream.close_workers()
    assert [m["type"] for m in messages] == ["start", "unavailable"]
    assert messages[1]["reason"] == "gpu" and messages[1]["message"].startswith("No ZeroGPU GPU is available")
