"""A stuck device ends in an error, not in silence (`engine/stall.py`).

The watch's rule on a fake clock; then the real engine over the tiny parity checkpoints on the CPU
with a runner whose step never returns until the test lets it (what a GPU that stopped finishing
work looks like from the engine thread): the running and the queued stream get
`EngineStalledError`, new requests are refused with it, the stats say so, and once the step
returns the engine thread ends without touching anything. There the watch runs on a fake clock
that the test moves on only once the engine thread is known to be blocked, so no machine is slow
enough to trip it early; the tests' deadlines only turn a hang into a failure.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from safetensors.torch import load_file
from support.streams import until_error

from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine import engine as engine_module
from tts_core.engine.cpu import EagerRunner
from tts_core.engine.engine import Engine
from tts_core.engine.pipeline import CodecPipeline
from tts_core.engine.stall import StallWatch
from tts_core.engine.stream import Segment, Stream
from tts_core.errors import EngineStalledError
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_watch_reports_one_iteration_past_the_limit_once() -> None:
    clock, reports = _Clock(), []
    watch = StallWatch(10.0, reports.append, clock=clock, start=False)
    assert not watch.check()  # idle: nothing to report however long
    clock.now = 100.0
    assert not watch.check()
    watch.busy()
    clock.now = 109.9
    assert not watch.check()
    watch.idle()  # that iteration ended in time; the next starts afresh
    clock.now = 115.0
    watch.busy()
    clock.now = 124.0
    assert not watch.check() and reports == []
    clock.now = 125.5
    assert watch.check() and reports == [10.5] and watch.stalled_after_s == 10.5
    clock.now = 200.0
    assert not watch.check() and reports == [10.5]  # reported once


def test_the_watch_needs_a_positive_limit() -> None:
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="stall timeout"):
            StallWatch(bad, print, start=False)
    with pytest.raises(ValueError, match="stall_timeout_s"):
        EngineConfig(stall_timeout_s=0)


@pytest.fixture(scope="module")
def models(parity_dir):
    return load_lm(parity_dir / "tiny_lm"), load_codec(parity_dir / "tiny_codec")


@pytest.fixture(scope="module")
def prompt(parity_dir):
    return load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))["A_voice_clone_en.input_ids"].numpy()


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    """The engines built in the test get a watch on this clock, with no thread of its own: it reports
    a stall only when the test calls `engine._watch.check()`."""
    fake = _Clock()
    monkeypatch.setattr(engine_module, "StallWatch",
                        lambda timeout_s, on_stall: StallWatch(timeout_s, on_stall, clock=fake, start=False))
    return fake


def _stall(engine: Engine, clock: _Clock) -> None:
    """(The engine thread is blocked in the device.) Its iteration passes the limit: the watch reports it."""
    clock.now += engine.config.stall_timeout_s + 1
    assert engine._watch.check()


class _StuckRunner(EagerRunner):
    """A stuck device: from its `stick_at`-th call of `stuck_in` ("step": the engine thread's step,
    "decode": the codec thread's) on, the call blocks until `unstick` is set."""

    def __init__(self, models, *, stuck_in: str, stick_at: int):
        lm, codec = models
        super().__init__(lm, codec, num_slots=1, max_context_rows=600, device="cpu")
        self.stuck_in, self.stick_at, self.calls = stuck_in, stick_at, 0
        self.stuck, self.unstick = threading.Event(), threading.Event()

    def _maybe_stick(self, name: str) -> None:
        if name != self.stuck_in:
            return
        self.calls += 1
        if self.calls >= self.stick_at:
            self.stuck.set()
            assert self.unstick.wait(60), f"the test never released the stuck {name}"

    def step(self, slots):
        self._maybe_stick("step")
        return super().step(slots)

    def decode_async(self, slots, codes):
        self._maybe_stick("decode")
        return super().decode_async(slots, codes)


def _job(name: str, prompt: np.ndarray, seed: int, frames: int = 40) -> Stream:
    return Stream(stream_id=name, segments=(Segment(rows=prompt, max_frames=frames),), sampling=SamplingParams(),
                     seed=seed, submitted_at=time.monotonic())


def _until_error(stream) -> BaseException:
    """Chunks until the error that ends the stream."""
    return until_error(stream)


def test_a_stuck_step_fails_every_stream_and_refuses_new_ones(models, prompt, clock) -> None:
    runner = _StuckRunner(models, stuck_in="step", stick_at=1)
    engine = Engine(runner, EngineConfig(max_active_streams=1, max_queue=2))
    try:
        running = engine.submit(_job("running", prompt, 1))
        waiting = engine.submit(_job("waiting", prompt, 2))  # one slot: this one is queued
        assert runner.stuck.wait(30)
        _stall(engine, clock)
        for handle in (running, waiting):
            error = _until_error(handle)
            assert isinstance(error, EngineStalledError), repr(error)
            assert "stopped responding" in error.message and "restart" in error.message
            assert error.code == "engine_stalled"
        assert engine.stats().stalled
        with pytest.raises(EngineStalledError, match="must be restarted"):
            engine.submit(_job("later", prompt, 3))
    finally:
        runner.unstick.set()  # the step returns: the engine thread sees the stall and ends
        engine.close(timeout_s=30)
    assert not engine._thread.is_alive()
    assert runner.calls == runner.stick_at  # nothing was stepped after the stall


def test_requests_waiting_to_be_prepared_get_the_stall_error(models, prompt, clock) -> None:
    """The engine thread builds queued requests between iterations (`intake.py`): stuck in the
    device it never will, so the stall fails those still queued, and refuses later ones at once."""
    runner = _StuckRunner(models, stuck_in="step", stick_at=1)
    engine = Engine(runner, EngineConfig(max_active_streams=1, max_queue=2))
    try:
        running = engine.submit(_unbuilt("running", prompt))
        assert runner.stuck.wait(30)  # (built, admitted and stepping)
        assert running.segments is not None
        queued = engine.submit(_unbuilt("queued", prompt))  # the engine thread is stuck: nobody builds it
        _stall(engine, clock)
        error = _until_error(queued)
        assert isinstance(error, EngineStalledError) and "must be restarted" in str(error)
        assert queued.segments is None
        with pytest.raises(EngineStalledError):
            engine.submit(_unbuilt("later", prompt))
    finally:
        runner.unstick.set()
        engine.close(timeout_s=30)
    assert not engine._thread.is_alive()


def _unbuilt(name: str, prompt: np.ndarray) -> Stream:
    """A stream whose segments the engine thread builds (as `_job(name, prompt, 5)`'s)."""
    return Stream(stream_id=name, sampling=SamplingParams(), seed=5,
                  build=lambda: (Segment(rows=prompt, max_frames=5),))


def test_an_engine_that_never_stalls_says_so(models) -> None:
    lm, codec = models
    engine = Engine(EagerRunner(lm, codec, num_slots=1, max_context_rows=600, device="cpu"), EngineConfig())
    try:
        assert engine.stats().stalled is False
    finally:
        engine.close()


def test_closing_an_engine_stuck_in_the_codec_thread_returns(models, prompt, clock, monkeypatch) -> None:
    """The codec thread stuck in the device, the engine thread stuck waiting for it: the stall is
    reported, and `close` gives up on both threads after its timeout instead of waiting for ever."""
    blocked = threading.Event()  # the engine thread waits for a decode that never finishes
    drain = CodecPipeline.drain

    def watched_drain(pipeline: CodecPipeline) -> None:
        if pipeline._inflight and not pipeline._inflight[0].done():  # (the first decode is the stuck one)
            blocked.set()
        drain(pipeline)

    monkeypatch.setattr(CodecPipeline, "drain", watched_drain)
    runner = _StuckRunner(models, stuck_in="decode", stick_at=1)
    engine = Engine(runner, EngineConfig(max_active_streams=1, max_queue=0, pipeline_codec=True))
    try:
        handle = engine.submit(_job("decoding", prompt, 4, frames=2))  # its last chunk waits for the first
        assert runner.stuck.wait(30) and blocked.wait(30)
        _stall(engine, clock)
        assert isinstance(_until_error(handle), EngineStalledError)
        closer = threading.Thread(target=engine.close, kwargs={"timeout_s": 0.2})
        closer.start()
        closer.join(30)  # a deadline only: without giving up on the stuck threads it never returns
        assert not closer.is_alive(), "close() waited for the stuck codec thread"
    finally:
        runner.unstick.set()
        engine.close(timeout_s=30)  # now that nothing is stuck, both threads end before the test does
    assert not engine._thread.is_alive()
