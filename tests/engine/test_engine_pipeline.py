"""The pipelined engine (codec on a second thread) emits exactly what the serial engine emits.

Tiny parity checkpoints on the CPU: the same jobs (several streams, several segments with pauses,
sampled codes) through `Engine` with `pipeline_codec` on and off must give the same chunks in the
same order; cancelling a pipelined stream mid-way must leave the others and the slot clean.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from safetensors.torch import load_file
from support.streams import read, read_all, wait_ended

from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.cpu import EagerRunner
from tts_core.engine.engine import Engine
from tts_core.engine.pipeline import CodecPipeline
from tts_core.engine.stream import Segment, Stream, StreamStatus
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CASES = ["A_voice_clone_en", "B_voice_clone_zh", "D_continuation_text_only"]


@pytest.fixture(scope="module")
def models(parity_dir):
    return load_lm(parity_dir / "tiny_lm"), load_codec(parity_dir / "tiny_codec")


@pytest.fixture(scope="module")
def prompts(parity_dir):
    vectors = load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))
    return [vectors[f"{case}.input_ids"].numpy() for case in CASES]


def _engine(models, pipelined: bool) -> Engine:
    lm, codec = models
    runner = EagerRunner(lm, codec, num_slots=3, max_context_rows=600, device="cpu")
    return Engine(runner, EngineConfig(max_active_streams=3, max_queue=4, pipeline_codec=pipelined))


def _job(name: str, prompt: np.ndarray, seed: int, frames: tuple[int, ...]) -> Stream:
    segments = tuple(Segment(rows=prompt, max_frames=n, pause_after_s=0.1 if i + 1 < len(frames) else 0.0)
                     for i, n in enumerate(frames))
    return Stream(stream_id=name, segments=segments, sampling=SamplingParams(), seed=seed,
                     submitted_at=time.monotonic())


def _collect(stream) -> list:
    return read_all(stream)


def _run(engine: Engine, jobs: list[Stream]) -> list[list]:
    try:
        handles = [engine.submit(job) for job in jobs]
        return [_collect(handle) for handle in handles]
    finally:
        engine.close()


def test_pipelined_engine_emits_what_the_serial_engine_emits(models, prompts):
    jobs = [_job(f"s{i}", prompt, 40 + i, (9, 7)) for i, prompt in enumerate(prompts)]
    pipelined_engine = _engine(models, pipelined=True)
    assert pipelined_engine.features()[0].codec_thread
    serial_engine = _engine(models, pipelined=False)
    assert not serial_engine.features()[0].codec_thread
    want = _run(serial_engine, jobs)
    got = _run(pipelined_engine, [_job(j.id, j.segments[0].rows, j.seed, (9, 7)) for j in jobs])
    for want_chunks, got_chunks in zip(want, got):
        assert [c.seq for c in got_chunks] == list(range(len(got_chunks)))
        assert [c.is_last for c in got_chunks] == [False] * (len(got_chunks) - 1) + [True]
        assert sum(c.is_pause for c in got_chunks) == 1  # the pause between the two segments
        np.testing.assert_array_equal(np.concatenate([c.codes for c in got_chunks]),
                                      np.concatenate([c.codes for c in want_chunks]))
        # Chunk boundaries follow wall-clock pacing; the streaming codec is chunking-invariant to ~1e-6.
        np.testing.assert_allclose(np.concatenate([c.pcm for c in got_chunks], axis=1),
                                   np.concatenate([c.pcm for c in want_chunks], axis=1), atol=1e-5)


def test_cancelling_a_pipelined_stream_leaves_the_others_and_its_slot_clean(models, prompts):
    engine = _engine(models, pipelined=True)
    try:
        keep = engine.submit(_job("keep", prompts[0], 7, (30,)))
        drop = engine.submit(_job("drop", prompts[1], 8, (200,)))
        assert len(read(drop, 1)) == 1
        drop.cancel()
        read_all(drop)  # ends at once, with no error
        assert wait_ended(drop) is StreamStatus.CANCELLED
        kept = _collect(keep)
        reuse = _collect(engine.submit(_job("reuse", prompts[2], 9, (12,))))
    finally:
        engine.close()
    alone = _run(_engine(models, pipelined=False), [_job("keep", prompts[0], 7, (30,)),
                                                    _job("reuse", prompts[2], 9, (12,))])
    for got, want in ((kept, alone[0]), (reuse, alone[1])):
        np.testing.assert_array_equal(np.concatenate([c.codes for c in got]), np.concatenate([c.codes for c in want]))
        np.testing.assert_allclose(np.concatenate([c.pcm for c in got], axis=1),
                                   np.concatenate([c.pcm for c in want], axis=1), atol=1e-5)


def test_warm_prefix_is_computed_when_idle_and_reused(models, prompts):
    lm, codec = models
    engine = Engine(EagerRunner(lm, codec, num_slots=2, max_context_rows=600, device="cpu"),
                    EngineConfig(max_active_streams=2, max_queue=2))
    prompt = prompts[0]
    prefix = prompt[:60]
    try:
        engine.warm_prefix(prefix)
        engine.warm_prefix(prefix)  # queued twice: computed once
        cache = engine.runner.prefix_cache
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(cache) == 0:  # the engine thread computes it
            time.sleep(0.01)
        assert len(cache) == 1
        hits = cache.hits
        job = Stream(stream_id="warmed", segments=(Segment(rows=prompt, max_frames=6, prefix_rows=60),),
                        sampling=SamplingParams(), seed=3, submitted_at=time.monotonic())
        warmed = _collect(engine.submit(job))
        assert cache.hits == hits + 1  # the stream's prefill started from the warmed prefix
    finally:
        engine.close()
    cold = _run(_engine(models, pipelined=False), [Stream(
        stream_id="cold", segments=(Segment(rows=prompt, max_frames=6),), sampling=SamplingParams(), seed=3,
        submitted_at=time.monotonic())])[0]
    np.testing.assert_array_equal(np.concatenate([c.codes for c in warmed]), np.concatenate([c.codes for c in cold]))


# ---- the split readout (a GPU decode's audio read out on a second thread) -----------------------


def test_pipeline_second_parts_run_in_order_and_drain_waits_for_them():
    pipeline = CodecPipeline(split=True)
    ran: list[tuple[str, int]] = []
    release = threading.Event()
    try:
        for i in range(5):
            def first(i=i):
                ran.append(("first", i))

                def second():
                    if i == 0:
                        assert release.wait(10)  # the first readout is slow: later first parts go ahead
                    ran.append(("second", i))

                return second

            pipeline.push(first)
        deadline = time.monotonic() + 10
        while sum(1 for kind, _ in ran if kind == "first") < 5 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert [i for kind, i in ran if kind == "first"] == list(range(5))  # none waited for a readout
        release.set()
        pipeline.drain()
        assert [i for kind, i in ran if kind == "second"] == list(range(5))
    finally:
        pipeline.close()


@pytest.mark.parametrize("stage", ["first", "second"])
def test_pipeline_errors_of_either_part_reach_the_drain(stage):
    pipeline = CodecPipeline(split=True)

    def boom():
        raise ValueError(f"{stage} failed")

    try:
        pipeline.push(boom if stage == "first" else (lambda: boom))
        pipeline.push(lambda: None)
        with pytest.raises(ValueError, match=f"{stage} failed"):
            pipeline.drain()
        pipeline.push(lambda: (lambda: None))  # still serving
        pipeline.drain()
    finally:
        pipeline.close()


class _SlowReadoutRunner(EagerRunner):
    """The CPU runner, with each decode's audio handed out by a `.result()` that, for the first decode,
    waits until the next decode has been queued: as a GPU readout overlaps the next decode."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.decodes = 0
        self.second_queued = threading.Event()

    def decode_async(self, slots, codes):
        ready = super().decode_async(slots, codes)
        self.decodes += 1
        index = self.decodes
        if index >= 2:
            self.second_queued.set()
        runner = self

        class Slow:
            def result(self):
                if index == 1:
                    assert runner.second_queued.wait(30), "the next decode waited for this readout"
                return ready.result()

        return Slow()


def test_split_readout_engine_emits_what_the_serial_engine_emits(models, prompts):
    """A decode's readout and emission run on the pipeline's second thread while the next decode is
    queued (the CUDA default, here with the CPU runner): same chunks, same order as the serial engine."""
    lm, codec = models
    runner = _SlowReadoutRunner(lm, codec, num_slots=3, max_context_rows=600, device="cpu")
    engine = Engine(runner, EngineConfig(max_active_streams=3, max_queue=4, pipeline_codec=True))
    engine._pipeline.close()
    engine._pipeline = CodecPipeline(split=True)
    jobs = [_job(f"s{i}", prompt, 40 + i, (9, 7)) for i, prompt in enumerate(prompts)]
    got = _run(engine, jobs)
    want = _run(_engine(models, pipelined=False), [_job(j.id, j.segments[0].rows, j.seed, (9, 7)) for j in jobs])
    assert runner.second_queued.is_set()
    for got_chunks, want_chunks in zip(got, want):
        assert [c.seq for c in got_chunks] == list(range(len(got_chunks)))
        np.testing.assert_array_equal(np.concatenate([c.codes for c in got_chunks]),
                                      np.concatenate([c.codes for c in want_chunks]))
        np.testing.assert_allclose(np.concatenate([c.pcm for c in got_chunks], axis=1),
                                   np.concatenate([c.pcm for c in want_chunks], axis=1), atol=1e-5)
