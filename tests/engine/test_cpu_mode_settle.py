"""`--quantize auto` keeps the CPU precision measurement off the first-audio path: a first start
measures fp32 alone before serving; when it is too slow the server starts in int8 and fp16 is
measured at idle moments, the engine switching between requests. Fake clocks and fake measurements:
no timing is asserted."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from tts_core import cpu_mode_cache
from tts_core.config import EngineConfig
from tts_core.cpu_mode import FRAME_S, ModeChoice
from tts_core.cpu_mode_settle import PendingMode, QuietMeasure, SettleCancelled, settle_cpu_mode
from tts_core.engine.types import EngineStats
from tts_core.loader import _apply_precision
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm
from tts_core.model.quant import quantize_codec, quantize_lm
from tts_core.synthesizer import Synthesizer
from tts_core.types import SynthesisRequest


def _mode_of(lm) -> str:
    """fp32, fp16 or int8, read off the LM's global transformer (`model/quant.py`)."""
    kind = type(lm.transformer.h[0].attn.c_proj)
    if kind is torch.nn.Linear:
        return "fp32"
    return "int8" if lm.transformer.h[0].attn.c_proj.weight().dtype == torch.qint8 else "fp16"


class _FakeMeasure:
    """Seconds per frame by mode (RTF × 80 ms), recording which modes were measured."""

    def __init__(self, rtf: dict[str, float]):
        self.rtf, self.calls = rtf, []

    def __call__(self, lm, codec, *, pipelined: bool) -> float:
        self.calls.append(_mode_of(lm))
        return self.rtf[self.calls[-1]] * FRAME_S


@pytest.fixture
def tiny_loader(data_dir):
    parity = data_dir / "parity"
    return lambda: (load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec"))


def _precision(loader, measure, lines=None):
    lm, codec = loader()
    return _apply_precision(lm, codec, "auto", torch.device("cpu"), EngineConfig(),
                            (lines if lines is not None else []).append, load_fp32=loader, measure=measure)


def test_a_first_start_measures_fp32_alone_before_serving(tmp_path, monkeypatch, tiny_loader):
    monkeypatch.setenv("MOSS_TTS_CACHE_DIR", str(tmp_path))
    fast = _FakeMeasure({"fp32": 0.5})
    kept = _precision(tiny_loader, fast)
    assert fast.calls == ["fp32"] and kept.choice.mode == "fp32" and kept.pending is None
    assert _mode_of(kept.lm) == "fp32"
    # fp32 too slow: int8 at once, fp16 not measured before serving.
    (tmp_path / cpu_mode_cache.FILE_NAME).unlink()
    slow = _FakeMeasure({"fp32": 1.6, "fp16": 0.7, "int8": 0.5})
    lines: list[str] = []
    first = _precision(tiny_loader, slow, lines)
    assert slow.calls == ["fp32"] and _mode_of(first.lm) == "int8"
    assert first.choice.mode == "int8" and not first.choice.settled and "for now" in first.choice.reason
    assert first.pending is not None and first.pending.fp32_rtf == pytest.approx(1.6)
    # Stopped before it settled: the next start serves int8 without measuring anything.
    again = _FakeMeasure({})
    second = _precision(tiny_loader, again)
    assert again.calls == [] and _mode_of(second.lm) == "int8" and second.pending is not None


def test_settling_switches_to_fp16_when_it_keeps_up_and_keeps_the_choice(tmp_path, tiny_loader):
    lm, _ = tiny_loader()
    key = cpu_mode_cache.choice_key(lm.config, pipelined=True)
    pending = PendingMode(tiny_loader, 1.6, True, tmp_path, key)
    applied = []
    measure = _FakeMeasure({"fp16": 0.7, "int8": 0.5})
    choice = settle_cpu_mode(pending, None, stop=threading.Event(), measure=measure,
                             apply=lambda lm, codec, choice: applied.append((lm, choice)))
    assert measure.calls == ["fp16"]  # the most faithful mode that keeps up: int8 need not be measured
    assert choice.mode == "fp16" and choice.settled and choice.rtf == {"fp32": 1.6, "fp16": 0.7}
    (served, told), = applied
    assert _mode_of(served) == "fp16" and told == choice
    assert cpu_mode_cache.load_choice(tmp_path, key) == choice  # the next start applies it at once


def test_settling_keeps_int8_when_fp16_is_too_slow(tmp_path, tiny_loader):
    lm, _ = tiny_loader()
    pending = PendingMode(tiny_loader, 1.6, True, tmp_path, cpu_mode_cache.choice_key(lm.config, pipelined=True))
    applied = []
    choice = settle_cpu_mode(pending, None, stop=threading.Event(), measure=_FakeMeasure({"fp16": 0.9, "int8": 0.6}),
                             apply=lambda lm, codec, choice: applied.append((lm, codec, choice.mode)))
    assert applied == [(None, None, "int8")]  # nothing to swap: the engine serves int8 already
    assert "most faithful mode that runs in real time" in choice.reason


class _Engine:
    """The engine as `QuietMeasure` sees it: stats the test changes."""

    def __init__(self):
        self.state = {"active_streams": 0, "queued": 0, "submitted": 0}

    def stats(self) -> EngineStats:
        return EngineStats(**self.state, max_active_streams=1, max_queue=1, finished=0, cancelled=0, refused=0,
                           stalled=False)


def test_a_measurement_waits_for_quiet_and_is_taken_again_when_a_request_came():
    engine, clock, cpu = _Engine(), [0.0], [0.0]
    engine.state["active_streams"] = 1

    def sleep(seconds):
        clock[0] += seconds
        if clock[0] >= 3.0:
            engine.state["active_streams"] = 0  # the stream ends 3 s in

    taken = []

    def measure(lm, codec, *, pipelined):
        taken.append(clock[0])
        if len(taken) == 1:
            engine.state["submitted"] += 1  # a request arrived during the first measurement
        return 0.05

    quiet = QuietMeasure(engine.stats, stop=threading.Event(), measure=measure, clock=lambda: clock[0],
                         sleep=sleep, cpu_clock=lambda: cpu[0])
    assert quiet(None, None, pipelined=True) == 0.05
    assert len(taken) == 2 and quiet.retries == 1
    assert taken[0] >= 3.0 + 1.0  # not before the stream ended and a quiet second passed


def test_other_work_in_the_process_is_no_quiet_moment():
    engine, clock, cpu = _Engine(), [0.0], [0.0]

    def sleep(seconds):
        clock[0] += seconds
        if clock[0] < 5.0:
            cpu[0] += seconds  # a core busy with other start-up work (the page, voice clips)

    quiet = QuietMeasure(engine.stats, stop=threading.Event(), clock=lambda: clock[0], sleep=sleep,
                         cpu_clock=lambda: cpu[0], measure=lambda *a, **k: 0.05)
    quiet.wait_quiet()
    assert clock[0] >= 5.0


def test_settling_stops_with_the_server():
    stop = threading.Event()
    stop.set()
    quiet = QuietMeasure(_Engine().stats, stop=stop, measure=lambda *a, **k: 0.05)
    with pytest.raises(SettleCancelled):
        quiet(None, None, pipelined=True)
    pending = PendingMode(lambda: pytest.fail("nothing is loaded once stopped"), 1.6, True, None, "k")
    assert settle_cpu_mode(pending, _Engine(), stop=stop, apply=lambda *a: pytest.fail("nothing applied")) is None


def test_the_engine_switches_weights_between_requests(data_dir, tmp_path):
    parity = data_dir / "parity"
    synth = Synthesizer.from_pretrained(str(parity / "tiny_lm"), str(parity / "tiny_codec"), device="cpu",
                                        tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
                                        voices_dir=None, cache_dir=tmp_path, allow_download=False, warmup=False,
                                        quantize="int8")
    try:
        request = SynthesisRequest(text="Hello there.", mode="continuation", seed=3, max_frames=6)
        before = synth.synthesize(request)
        lm, codec = load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec")
        quantize_lm(lm, "fp16")
        quantize_codec(codec, "fp16")
        choice = ModeChoice("fp16", {"fp32": 1.6, "fp16": 0.7}, "auto: fp16 (test)")
        synth._serve_settled(lm, codec, choice)  # returns once the engine switched
        assert synth.engine.runner.lm is lm and synth.engine.runner.codec is codec
        health = synth.health()
        assert health["quantize"] == "fp16" and health["precision"] == "auto: fp16 (test)"
        after = synth.synthesize(request)
        assert after.pcm.shape[1] > 0 and before.pcm.shape[1] > 0
    finally:
        synth.close()


def test_the_runner_refuses_to_swap_weights_under_a_running_stream(data_dir):
    from tts_core.config import SamplingParams
    from tts_core.engine.cpu import EagerRunner

    parity = data_dir / "parity"
    lm, codec = load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec")
    runner = EagerRunner(lm, codec, num_slots=2, max_context_rows=64, device=torch.device("cpu"))
    runner.begin_stream(0, SamplingParams.greedy(), 0)
    with pytest.raises(RuntimeError, match="between requests"):
        runner.replace_models(lm, codec)
    runner.release(0)
    fresh = load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec")
    runner.replace_models(*fresh)
    assert len(runner.prefix_cache) == 0
    # The new weights are prepared like a new runner's: the same stream steps to the same state.
    other = EagerRunner(load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec"), num_slots=2,
                        max_context_rows=64, device=torch.device("cpu"))
    assert runner.batched == other.batched
    rows = np.full((8, 17), 1024, np.int64)
    rows[:, 0] = np.arange(20, 28)
    for each in (runner, other):
        each.begin_stream(1, SamplingParams.greedy(), 0)
        each.start_segment(1, rows, None)
        each.step([1])
    assert torch.equal(runner.hidden[1], other.hidden[1])


def test_work_beside_the_load_starts_only_after_the_measurement(tmp_path, monkeypatch, tiny_loader):
    """The default voice is encoded beside the load (`loader._resolve_default_voice`), but never
    beside the fp32 measurement, which would then see a busier CPU than the one it serves on."""
    monkeypatch.setenv("MOSS_TTS_CACHE_DIR", str(tmp_path))
    events: list[str] = []

    def measure(lm, codec, *, pipelined):
        events.append("measure")
        return 1.6 * FRAME_S

    lm, codec = tiny_loader()
    _apply_precision(lm, codec, "auto", torch.device("cpu"), EngineConfig(), lambda line: None,
                     load_fp32=tiny_loader, measure=measure, measured=lambda: events.append("measured"))
    assert events == ["measure", "measured"]
    events.clear()
    lm, codec = tiny_loader()  # the kept choice: nothing to measure, the work may start at once
    _apply_precision(lm, codec, "auto", torch.device("cpu"), EngineConfig(), lambda line: None,
                     load_fp32=tiny_loader, measure=measure, measured=lambda: events.append("measured"))
    assert events == ["measured"]
