"""Request preparation on the engine's thread (`tts_core/preparer.py`): order, errors, cancellation,
shutdown, engines detaching; and through the Synthesizer with the tiny checkpoints, the same audio as
preparing in each caller's thread. Every wait has a deadline that only catches a hang."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.types import StreamHandle, StreamJob
from tts_core.errors import EngineStalledError, InvalidRequestError, QueueFullError, TTSError
from tts_core.preparer import Preparer
from tts_core.types import SynthesisRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _job(name: str) -> StreamJob:
    return StreamJob(request_id=name, segments=(), sampling=SamplingParams(), seed=0, submitted_at=0.0)


class _Engine:
    """What the preparer submits to: records submissions and cancellations; may refuse or block."""

    def __init__(self):
        self.submitted: list[str] = []
        self.cancelled: list[str] = []
        self.refuse: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def submit(self, job: StreamJob) -> StreamHandle:
        self.entered.set()
        assert self.gate.wait(30)
        if job.request_id in self.refuse:
            raise QueueFullError("server busy", retry_after_s=1.0)
        self.submitted.append(job.request_id)
        return StreamHandle(job=job)

    def cancel(self, handle: StreamHandle) -> None:
        self.cancelled.append(handle.job.request_id)


def _build(name: str) -> StreamJob:
    if name.startswith("bad"):
        raise InvalidRequestError(f"{name} is bad", param="input")
    if name.startswith("bug"):
        raise RuntimeError("a bug")
    return _job(name)


@pytest.fixture
def engine():
    return _Engine()


@pytest.fixture
def preparer(engine):
    return Preparer(_build, engine.submit, engine.cancel)


def test_requests_are_submitted_in_arrival_order_each_to_its_caller(preparer, engine):
    woken = []
    preparer.attach(lambda: woken.append(1))
    names = [f"r{i}" for i in range(20)]
    pending = [preparer.enqueue(name) for name in names]
    assert len(woken) == 1 + 20 and preparer.waiting  # once on attaching, once per request
    assert preparer.pump() == 20 and not preparer.waiting
    handles = [preparer.wait(p) for p in pending]
    assert engine.submitted == names
    assert [h.job.request_id for h in handles] == names


def test_a_bad_request_fails_alone_and_the_rest_are_served(preparer, engine):
    engine.refuse.add("full")
    pending = {name: preparer.enqueue(name) for name in ("a", "bad-text", "bug", "full", "b")}
    assert preparer.pump() == 5
    with pytest.raises(InvalidRequestError, match="bad-text is bad"):
        preparer.wait(pending["bad-text"])
    with pytest.raises(RuntimeError, match="a bug"):
        preparer.wait(pending["bug"])
    with pytest.raises(QueueFullError):
        preparer.wait(pending["full"])
    assert preparer.wait(pending["a"]).job.request_id == "a"
    assert preparer.wait(pending["b"]).job.request_id == "b"
    assert engine.submitted == ["a", "b"]


def test_cancelling_while_queued_skips_the_request(preparer, engine):
    first = preparer.enqueue("first")
    second = preparer.enqueue("second")
    cancel = threading.Event()
    cancel.set()
    assert preparer.wait(second, cancel) is None  # gave up at once
    preparer.pump()
    assert preparer.wait(first).job.request_id == "first"
    assert second.ready.is_set() and second.handle is None
    assert engine.submitted == ["first"] and engine.cancelled == []


def test_a_request_abandoned_while_it_is_submitted_is_cancelled(preparer, engine):
    """The caller stops waiting while its job is inside the engine's submit: the handle that comes
    back is cancelled, so no stream runs for nobody."""
    engine.gate.clear()
    pending = preparer.enqueue("late")
    pump = threading.Thread(target=preparer.pump)
    pump.start()
    assert engine.entered.wait(30)  # the pumping thread is inside the submit, held by the gate
    preparer.abandon(pending)
    engine.gate.set()
    pump.join(30)
    assert pending.ready.is_set()
    assert engine.submitted == ["late"] and engine.cancelled == ["late"]


def test_abandoning_after_submission_cancels_the_stream(preparer, engine):
    pending = preparer.enqueue("done")
    preparer.pump()
    assert preparer.wait(pending) is not None
    preparer.abandon(pending)
    assert engine.cancelled == ["done"]


def test_close_fails_the_queued_requests_and_refuses_new_ones(preparer, engine):
    pending = [preparer.enqueue(f"q{i}") for i in range(3)]
    preparer.close()
    for p in pending:
        with pytest.raises(TTSError, match="shutting down"):
            preparer.wait(p)
    with pytest.raises(TTSError, match="shutting down"):
        preparer.enqueue("late")
    assert preparer.pump() == 0 and engine.submitted == []


def test_when_the_last_engine_detaches_queued_and_new_requests_get_its_reason(preparer, engine):
    first, second = (lambda: None), (lambda: None)
    preparer.attach(first)
    preparer.attach(second)
    queued = preparer.enqueue("queued")
    preparer.detach(first, EngineStalledError("the GPU stopped responding"))
    assert not queued.ready.is_set()  # the other engine still pumps
    preparer.enqueue("accepted")
    preparer.detach(second, EngineStalledError("the GPU stopped responding"))
    with pytest.raises(EngineStalledError):
        preparer.wait(queued)
    with pytest.raises(EngineStalledError):
        preparer.enqueue("late")


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
        assert (synth._preparer is not None) is threaded
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


def test_a_pump_stops_at_its_time_budget_and_the_rest_wait(engine):
    """A flood of requests must not keep the engine thread from its streams: one pump prepares for at
    most its budget (at least one request), the next pump goes on from there."""
    now = [0.0]
    preparer = Preparer(lambda name: (now.__setitem__(0, now[0] + 0.03), _job(name))[1], engine.submit,
                        engine.cancel, clock=lambda: now[0])  # each build takes 30 ms of the fake clock
    pending = [preparer.enqueue(f"f{i}") for i in range(10)]
    assert preparer.pump(budget_s=0.1) == 4  # starting at 0, 30, 60 and 90 ms: within the budget
    assert preparer.waiting and engine.submitted == ["f0", "f1", "f2", "f3"]
    assert preparer.pump(budget_s=0.0) == 1  # always at least one
    assert preparer.pump(budget_s=1.0) == 5 and not preparer.waiting
    assert [preparer.wait(p).job.request_id for p in pending] == [f"f{i}" for i in range(10)]
