"""The engine's intake (`tts_core/engine/intake.py`): requests built into jobs on the engine's thread,
in order; errors, cancellation, shutdown and engines detaching reach each stream's outbox. Through
the Synthesizer with the tiny checkpoints: the same audio as building in each caller's thread, and
the engine thread never calls back into the synthesizer. Every wait has a deadline that only
catches a hang."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pytest

from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.intake import Intake
from tts_core.engine.types import StreamHandle, StreamJob, StreamStatus
from tts_core.errors import EngineStalledError, InvalidRequestError, QueueFullError, TTSError
from tts_core.types import SynthesisRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@dataclass(frozen=True)
class _Request:
    """A `Buildable` named `name`: bad-* raise an input error, bug-* a bug; `tick` runs first."""

    name: str
    tick: object = None

    def build(self, request_id: str) -> StreamJob:
        if self.tick is not None:
            self.tick()
        if self.name.startswith("bad"):
            raise InvalidRequestError(f"{self.name} is bad", param="input")
        if self.name.startswith("bug"):
            raise RuntimeError("a bug")
        return StreamJob(request_id=request_id, segments=(), sampling=SamplingParams(), seed=0, submitted_at=0.0,
                         notice=self.name)


class _Engine:
    """What the intake admits to: records admissions and cancellations; may refuse or block."""

    def __init__(self):
        self.submitted: list[str] = []
        self.cancelled: list[str] = []
        self.refuse: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def admit(self, handle: StreamHandle) -> None:
        self.entered.set()
        assert self.gate.wait(30)
        if handle.job.notice in self.refuse:
            raise QueueFullError("server busy", retry_after_s=1.0)
        self.submitted.append(handle.job.notice)

    def cancel(self, handle: StreamHandle) -> None:
        self.cancelled.append(handle.job.notice)


def _first(handle: StreamHandle):
    return handle.outbox.get(timeout=30)


@pytest.fixture
def engine():
    return _Engine()


@pytest.fixture
def intake(engine):
    return Intake(engine.admit, engine.cancel)


def test_requests_are_admitted_in_arrival_order_each_as_its_own_stream(intake, engine):
    woken = []
    intake.attach(lambda: woken.append(1))
    names = [f"r{i}" for i in range(20)]
    handles = [intake.enqueue(_Request(name)) for name in names]
    assert len(woken) == 1 + 20 and intake.waiting  # once on attaching, once per request
    assert all(h.job is None and h.status is StreamStatus.WAITING for h in handles)  # not built yet
    assert intake.pump() == 20 and not intake.waiting
    assert engine.submitted == names
    assert [h.job.notice for h in handles] == names
    assert all(h.job.request_id == h.request_id for h in handles) and len({h.request_id for h in handles}) == 20


def test_a_bad_request_fails_alone_and_the_rest_are_served(intake, engine):
    engine.refuse.add("full")
    handles = {name: intake.enqueue(_Request(name)) for name in ("a", "bad-text", "bug", "full", "b")}
    assert intake.pump() == 5
    with pytest.raises(InvalidRequestError, match="bad-text is bad"):
        raise _first(handles["bad-text"])
    assert isinstance(_first(handles["bug"]), RuntimeError)
    assert isinstance(_first(handles["full"]), QueueFullError)
    assert all(handles[n].status is StreamStatus.FAILED and _first(handles[n]) is None for n in ("bad-text", "bug", "full"))
    assert engine.submitted == ["a", "b"] and handles["a"].outbox.empty() and handles["b"].outbox.empty()


def test_a_stream_cancelled_while_queued_is_never_built(intake, engine):
    first = intake.enqueue(_Request("first"))
    second = intake.enqueue(_Request("second"))
    second.cancelled.set()  # what Engine.cancel does first, from the caller's thread
    intake.pump()
    assert first.job is not None and second.job is None
    assert second.status is StreamStatus.CANCELLED and _first(second) is None
    assert engine.submitted == ["first"] and engine.cancelled == []


def test_a_stream_cancelled_while_it_is_admitted_is_cancelled_in_the_engine(intake, engine):
    """The caller goes away while its job is inside the engine's admit: the engine is told to end it,
    so no stream runs for nobody."""
    engine.gate.clear()
    late = intake.enqueue(_Request("late"))
    pump = threading.Thread(target=intake.pump)
    pump.start()
    assert engine.entered.wait(30)  # the pumping thread is inside the admit, held by the gate
    late.cancelled.set()
    engine.gate.set()
    pump.join(30)
    assert engine.submitted == ["late"] and engine.cancelled == ["late"]


def test_close_fails_the_queued_requests_and_refuses_new_ones(intake, engine):
    handles = [intake.enqueue(_Request(f"q{i}")) for i in range(3)]
    intake.close()
    for handle in handles:
        with pytest.raises(TTSError, match="shutting down"):
            raise _first(handle)
    with pytest.raises(TTSError, match="shutting down"):
        intake.enqueue(_Request("late"))
    assert intake.pump() == 0 and engine.submitted == []


def test_when_the_last_engine_detaches_queued_and_new_requests_get_its_reason(intake, engine):
    first, second = (lambda: None), (lambda: None)
    intake.attach(first)
    intake.attach(second)
    queued = intake.enqueue(_Request("queued"))
    intake.detach(first, EngineStalledError("the GPU stopped responding"))
    assert queued.outbox.empty()  # the other engine still pumps
    intake.enqueue(_Request("accepted"))
    intake.detach(second, EngineStalledError("the GPU stopped responding"))
    assert isinstance(_first(queued), EngineStalledError)
    with pytest.raises(EngineStalledError):
        intake.enqueue(_Request("late"))


def test_a_pump_stops_at_its_time_budget_and_the_rest_wait(engine):
    """A flood of requests must not keep the engine thread from its streams: one pump builds for at
    most its budget (at least one request), the next pump goes on from there."""
    now = [0.0]
    intake = Intake(engine.admit, engine.cancel, clock=lambda: now[0])
    tick = lambda: now.__setitem__(0, now[0] + 0.03)  # noqa: E731  (each build takes 30 ms of the fake clock)
    handles = [intake.enqueue(_Request(f"f{i}", tick)) for i in range(10)]
    assert intake.pump(budget_s=0.1) == 4  # starting at 0, 30, 60 and 90 ms: within the budget
    assert intake.waiting and engine.submitted == ["f0", "f1", "f2", "f3"]
    assert intake.pump(budget_s=0.0) == 1  # always at least one
    assert intake.pump(budget_s=1.0) == 5 and not intake.waiting
    assert [h.job.notice for h in handles] == [f"f{i}" for i in range(10)]


# ---- through the Synthesizer ---------------------------------------------------------------------


def _synthesizer(data_dir, cache_dir, prepare_on_engine: bool = True):
    from tts_core import Synthesizer
    from tts_core.loader import load_parts

    parity = data_dir / "parity"
    config = EngineConfig(max_active_streams=4, max_queue=8)
    parts = load_parts(lm=str(parity / "tiny_lm"), codec=str(parity / "tiny_codec"), device="cpu", dtype="auto",
                       tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
                       voices_dir=data_dir / "presets", engine_config=config, cache_dir=cache_dir,
                       allow_download=False, quantize=None, report=lambda _line: None, devices=None)
    return Synthesizer(tokenizer=parts.tokenizer, engine=parts.engine, voices=parts.voices, config=config,
                       info=parts.info, lm_config=parts.lm_config, prepare_on_engine=prepare_on_engine)


def _stream_all(synth, requests) -> list[tuple[np.ndarray, np.ndarray]]:
    results: list = [None] * len(requests)

    def run(i):
        chunks = list(synth.stream(requests[i]))
        results[i] = (np.concatenate([c.codes for c in chunks]), np.concatenate([c.pcm for c in chunks], axis=1))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(r is not None for r in results)
    return results


def test_the_synthesizer_gives_the_same_audio_whoever_prepares(data_dir, tmp_path):
    requests = [SynthesisRequest(text=f"Number {i} says hello.", mode="continuation", seed=i, max_frames=6)
                for i in range(4)]
    got = {}
    for threaded in (True, False):
        synth = _synthesizer(data_dir, tmp_path / str(threaded), prepare_on_engine=threaded)
        assert synth._prepare_on_engine is threaded
        try:
            got[threaded] = _stream_all(synth, requests)
            with pytest.raises(InvalidRequestError):  # input errors still raise on the first next()
                next(synth.stream(SynthesisRequest(text="   ")))
        finally:
            synth.close()
    for (codes, pcm), (want_codes, want_pcm) in zip(got[True], got[False]):
        np.testing.assert_array_equal(codes, want_codes)
        # Chunk boundaries follow wall-clock pacing; the streaming codec is chunking-invariant to ~1e-6.
        np.testing.assert_allclose(pcm, want_pcm, atol=1e-5)


def test_the_engine_thread_never_calls_back_into_the_synthesizer(data_dir, tmp_path):
    """A request followed from `Synthesizer.stream` into the engine does not come back up: every
    function the engine's thread runs while it builds and serves requests is below the synthesizer
    (the job is built by `tts_core/jobs.py`, a function of the request and a read-only plan)."""
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
    assert "jobs.py" in ours and "engine/intake.py" in ours  # it did build the jobs
    assert not {f for f in ours if f == "synthesizer.py" or f.startswith("web/")}, sorted(ours)
