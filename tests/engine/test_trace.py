"""The engine trace (`bench/lib/trace.py`, `bench/engine/trace.py`): interval arithmetic, and a
real engine over the tiny checkpoints traced through the Synthesizer (CPU: host spans only)."""

from __future__ import annotations

import threading
import time

import pytest

from bench.lib.trace import EngineTrace, _thread_group, _union_s, summarize
from tts_core import EngineConfig, SynthesisRequest, Synthesizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_union_of_intervals_counts_overlaps_once_and_clips():
    assert _union_s([], 0.0, 10.0) == 0.0
    assert _union_s([(1.0, 3.0), (2.0, 5.0), (7.0, 8.0)], 0.0, 10.0) == pytest.approx(5.0)
    assert _union_s([(-2.0, 1.0), (9.0, 12.0)], 0.0, 10.0) == pytest.approx(2.0)  # clipped to the run
    assert _union_s([(4.0, 6.0), (1.0, 2.0), (1.5, 5.0)], 0.0, 10.0) == pytest.approx(5.0)  # unsorted


def test_threads_are_grouped_by_role():
    assert [_thread_group(n) for n in ("tts-engine", "tts-codec_0", "tts-codec-out_0", "bench-caller-7", "x")] == [
        "engine", "codec", "codec-out", "callers", "x"]


def test_a_traced_engine_records_each_threads_spans_and_the_admissions(data_dir, tmp_path):
    parity = data_dir / "parity"
    synth = Synthesizer.from_pretrained(
        str(parity / "tiny_lm"), str(parity / "tiny_codec"), tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
        voices_dir=data_dir / "presets", cache_dir=tmp_path, allow_download=False, warmup=False,
        engine_config=EngineConfig(max_active_streams=3, max_queue=3, pipeline_codec=True))
    trace = EngineTrace().attach(synth.engine)
    trace.attach_synthesizer(synth)
    requests = [SynthesisRequest(text=f"Take {i}, once more.", mode="continuation", seed=i, max_frames=5)
                for i in range(3)]
    try:
        started = time.perf_counter()
        threads = [threading.Thread(target=lambda r=r: list(synth.stream(r)), name=f"bench-caller-{i}")
                   for i, r in enumerate(requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        ended = time.perf_counter()
    finally:
        synth.close()
    figures = summarize(trace, started, ended)
    host = figures["host"]
    assert host["callers"]["check"]["count"] == 3  # the checks in the callers' threads
    assert host["engine"]["prepare"]["count"] == 3  # the prompt building on the engine thread
    assert host["engine"]["step"]["count"] >= 5  # the CPU's runner: each LM step runs in `step`
    decodes = host["codec"]["decode"]["count"] + host["engine"].get("decode", {}).get("count", 0)
    readouts = host["codec"]["readout"]["count"] + host["engine"].get("readout", {}).get("count", 0)
    assert decodes == readouts >= 3
    assert sum(n for _, n in figures["admissions_ms_count"]) == 3
    assert figures["device"] == {} and 0 < figures["wall_ms"] <= 1000 * (ended - started) + 1
    trace.clear()
    assert not trace.spans and not trace.admissions and not trace.decodes
