"""The engine's intake (`tts_core/engine/intake.py`): submitted streams built on the engine's thread,
in order; errors, cancellation, shutdown and engines detaching end each stream with its reason.
Through the Synthesizer with the tiny checkpoints: the same audio as building in the caller's thread,
and the engine thread never calls back into the synthesizer. Every wait has a deadline that only
catches a hang."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.intake import Intake
from tts_core.engine.stream import Stream, StreamStatus
from tts_core.errors import EngineStalledError, InvalidRequestError, QueueFullError, TTSError
from tts_core.types import SynthesisRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _stream(name: str, tick=None) -> Stream:
    """A stream named `name` whose build records it: bad-* raise an input error, bug-* a bug; `tick` runs first."""

    def build():
        if tick is not None:
            tick()
        if name.startswith("bad"):
            raise InvalidRequestError(f"{name} is bad", param="input")
        if name.startswith("bug"):
            raise RuntimeError("a bug")
        return ()

    return Stream(stream_id=name, sampling=SamplingParams(), seed=0, build=build, submitted_at=0.0)


class _Engine:
    """What the intake admits to: records admissions and the cancels it is told of; may refuse or block."""

    def __init__(self):
        self.submitted: list[str] = []
        self.cancelled: list[str] = []
        self.refuse: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def admit(self, stream: Stream) -> None:
        self.entered.set()
        assert self.gate.wait(30)
        if stream.id in self.refuse:
            raise QueueFullError("server busy", retry_after_s=1.0)
        self.submitted.append(stream.id)
        stream.held_by(lambda s: self.cancelled.append(s.id))


def _error(stream: Stream) -> BaseException | None:
    """The error that ended the stream (None when it ended without one)."""
    try:
        list(stream)
    except TTSError as exc:
        return exc.__cause__ or exc
    return None


@pytest.fixture
def engine():
    return _Engine()


@pytest.fixture
def intake(engine):
    return Intake(engine.admit)


def test_streams_are_admitted_in_arrival_order_each_built_once(intake, engine):
    woken = []
    intake.attach(lambda: woken.append(1))
    names = [f"r{i}" for i in range(20)]
    streams = [_stream(name) for name in names]
    for stream in streams:
        intake.submit(stream)
    assert len(woken) == 1 + 20 and intake.waiting  # once on attaching, once per stream
    assert all(s.segments is None and s.status is StreamStatus.WAITING for s in streams)  # not built yet
    assert intake.pump() == 20 and not intake.waiting
    assert engine.submitted == names
    assert all(s.segments == () for s in streams) and len({s.id for s in streams}) == 20


def test_a_bad_stream_fails_alone_and_the_rest_are_served(intake, engine):
    engine.refuse.add("full")
    streams = {name: _stream(name) for name in ("a", "bad-text", "bug", "full", "b")}
    for stream in streams.values():
        intake.submit(stream)
    assert intake.pump() == 5
    with pytest.raises(InvalidRequestError, match="bad-text is bad"):
        list(streams["bad-text"])
    assert isinstance(_error(streams["bug"]), RuntimeError)
    assert isinstance(_error(streams["full"]), QueueFullError)
    assert all(streams[n].status is StreamStatus.FAILED for n in ("bad-text", "bug", "full"))
    assert engine.submitted == ["a", "b"] and not streams["a"].ended and not streams["b"].ended


def test_a_stream_cancelled_while_queued_is_never_built(intake, engine):
    first, second = _stream("first"), _stream("second")
    intake.submit(first)
    intake.submit(second)
    second.cancel()  # from the caller's thread
    intake.pump()
    assert first.segments is not None and second.segments is None
    assert second.status is StreamStatus.CANCELLED and _error(second) is None
    assert engine.submitted == ["first"] and engine.cancelled == []


def test_a_stream_cancelled_while_it_is_admitted_is_cancelled_in_the_engine(intake, engine):
    """The caller goes away while its stream is inside the engine's admit: the engine is told to end
    it, so no stream runs for nobody."""
    engine.gate.clear()
    late = _stream("late")
    intake.submit(late)
    pump = threading.Thread(target=intake.pump)
    pump.start()
    assert engine.entered.wait(30)  # the pumping thread is inside the admit, held by the gate
    late.cancel()
    engine.gate.set()
    pump.join(30)
    assert engine.submitted == ["late"] and engine.cancelled == ["late"]


def test_close_fails_the_queued_streams_and_refuses_new_ones(intake, engine):
    streams = [_stream(f"q{i}") for i in range(3)]
    for stream in streams:
        intake.submit(stream)
    intake.close()
    for stream in streams:
        with pytest.raises(TTSError, match="shutting down"):
            list(stream)
    with pytest.raises(TTSError, match="shutting down"):
        intake.submit(_stream("late"))
    assert intake.pump() == 0 and engine.submitted == []


def test_when_the_last_engine_detaches_queued_and_new_streams_get_its_reason(intake, engine):
    first, second = (lambda: None), (lambda: None)
    intake.attach(first)
    intake.attach(second)
    queued = _stream("queued")
    intake.submit(queued)
    intake.detach(first, EngineStalledError("the GPU stopped responding"))
    assert not queued.ended  # the other engine still pumps
    intake.submit(_stream("accepted"))
    intake.detach(second, EngineStalledError("the GPU stopped responding"))
    assert isinstance(_error(queued), EngineStalledError)
    with pytest.raises(EngineStalledError):
        intake.submit(_stream("late"))


def test_a_pump_stops_at_its_time_budget_and_the_rest_wait(engine):
    """A flood of streams must not keep the engine thread from its running ones: one pump builds for
    at most its budget (at least one stream), the next pump goes on from there."""
    now = [0.0]
    intake = Intake(engine.admit, clock=lambda: now[0])
    tick = lambda: now.__setitem__(0, now[0] + 0.03)  # noqa: E731  (each build takes 30 ms of the fake clock)
    streams = [_stream(f"f{i}", tick) for i in range(10)]
    for stream in streams:
        intake.submit(stream)
    assert intake.pump(budget_s=0.1) == 4  # starting at 0, 30, 60 and 90 ms: within the budget
    assert intake.waiting and engine.submitted == ["f0", "f1", "f2", "f3"]
    assert intake.pump(budget_s=0.0) == 1  # always at least one
    assert intake.pump(budget_s=1.0) == 5 and not intake.waiting
    assert engine.submitted == [f"f{i}" for i in range(10)]


# ---- through the Synthesizer ---------------------------------------------------------------------


def _synthesizer(data_dir, cache_dir):
    from tts_core import Synthesizer
    from tts_core.config import LoadConfig
    from tts_core.loader import load_parts

    parity = data_dir / "parity"
    config = EngineConfig(max_active_streams=4, max_queue=8)
    load = LoadConfig(lm=str(parity / "tiny_lm"), codec=str(parity / "tiny_codec"), device="cpu",
                      tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
                      voices_dir=data_dir / "presets", cache_dir=cache_dir, allow_download=False)
    parts = load_parts(load, config, report=lambda _line: None)
    return Synthesizer(tokenizer=parts.tokenizer, engine=parts.engine, voices=parts.voices, config=config,
                       info=parts.info, lm_config=parts.lm_config)


def _stream_all(synth, requests, *, build_here: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every request's codes and audio, all at once; `build_here`: segments built in the caller's thread."""
    results: list = [None] * len(requests)

    def run(i):
        if build_here:
            chunks = list(synth.engine.submit(synth.build(requests[i])))
        else:
            chunks = list(synth.stream(requests[i]))
        results[i] = (np.concatenate([c.codes for c in chunks]), np.concatenate([c.pcm for c in chunks], axis=1))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(r is not None for r in results)
    return results


def test_the_synthesizer_gives_the_same_audio_whoever_builds(data_dir, tmp_path):
    requests = [SynthesisRequest(text=f"Number {i} says hello.", mode="continuation", seed=i, max_frames=6)
                for i in range(4)]
    got = {}
    for on_engine in (True, False):
        synth = _synthesizer(data_dir, tmp_path / str(on_engine))
        try:
            got[on_engine] = _stream_all(synth, requests, build_here=not on_engine)
            with pytest.raises(InvalidRequestError):  # input errors still raise on the first next()
                next(synth.stream(SynthesisRequest(text="   ")))
            with pytest.raises(InvalidRequestError):  # and at once from submit
                synth.submit(SynthesisRequest(text="x" * (synth.config.max_text_chars + 1)))
        finally:
            synth.close()
    for (codes, pcm), (want_codes, want_pcm) in zip(got[True], got[False]):
        np.testing.assert_array_equal(codes, want_codes)
        # Chunk boundaries follow wall-clock pacing; the streaming codec is chunking-invariant to ~1e-6.
        np.testing.assert_allclose(pcm, want_pcm, atol=1e-5)


def test_the_engine_thread_never_calls_back_into_the_synthesizer(data_dir, tmp_path):
    """A request followed from `Synthesizer.stream` into the engine does not come back up: every
    function the engine's thread runs while it builds and serves requests is below the synthesizer
    (the segments are built by `tts_core/segments.py`, a function of the request and a read-only plan)."""
    files: set[str] = set()

    def profile(frame, event, _arg):
        if event == "call" and threading.current_thread().name.startswith("tts-engine"):
            files.add(frame.f_code.co_filename)

    threading.setprofile(profile)  # threads started from now on: the engine's
    try:
        synth = _synthesizer(data_dir, tmp_path)
    finally:
        threading.setprofile(None)
    try:
        requests = [SynthesisRequest(text=f"Call {i} of two.", mode="continuation", seed=i, max_frames=4)
                    for i in range(2)]
        assert all(len(codes) for codes, _ in _stream_all(synth, requests))
    finally:
        synth.close()
    ours = {f.replace("\\", "/").split("/tts_core/", 1)[1] for f in files if "/tts_core/" in f.replace("\\", "/")}
    assert "segments.py" in ours and "engine/intake.py" in ours  # it did build the segments
    assert "synthesizer.py" not in ours, sorted(ours)
    assert not any("/studio/" in f.replace("\\", "/") for f in files), sorted(files)
