"""Step-ahead (`engine/lookahead.py`): launching each LM step before reading the one before changes no
stream's codes. Tiny parity checkpoints on the CPU, static runner (where step-ahead runs; the CPU
launches synchronously, the bookkeeping is the same as on a GPU): the same jobs with step-ahead on,
off (the runner seen through `bench.lib.runners.Synchronous`) and through the plain eager runner must give the same codes, with segments
ending at their caps, streams arriving while a step is in flight, and a stream cancelled mid-way.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pytest
from safetensors.torch import load_file
from support.streams import read, read_all, wait_ended

from bench.lib.runners import Synchronous
from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.cpu import EagerRunner
from tts_core.engine.cuda.static_runner import StaticRunner
from tts_core.engine.engine import Engine
from tts_core.engine.lookahead import Lookahead
from tts_core.engine.stream import Segment, Stream, StreamStatus

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CASES = ["A_voice_clone_en", "B_voice_clone_zh", "D_continuation_text_only"]


@pytest.fixture(scope="module")
def prompts(parity_dir):
    vectors = load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))
    return [vectors[f"{case}.input_ids"].numpy() for case in CASES]


class _CountingRunner(StaticRunner):
    """Records how many launched steps were outstanding at each launch (2 = a step ahead)."""

    def launch(self, slots):
        ticket = super().launch(slots)
        self.most_outstanding = max(getattr(self, "most_outstanding", 0), len(self._launched))
        return ticket


def _engine(tiny_models, *, static: bool, step_ahead: bool = True) -> Engine:
    lm, codec = tiny_models
    kind = _CountingRunner if static else EagerRunner
    runner = kind(lm, codec, num_slots=3, max_context_rows=600, device="cpu")
    return Engine(runner if step_ahead else Synchronous(runner), EngineConfig(max_active_streams=3, max_queue=4))


def _job(name: str, prompt: np.ndarray, seed: int, frames: tuple[int, ...]) -> Stream:
    segments = tuple(Segment(rows=prompt, max_frames=n, pause_after_s=0.05 if i + 1 < len(frames) else 0.0)
                     for i, n in enumerate(frames))
    return Stream(stream_id=name, segments=segments, sampling=SamplingParams(), seed=seed,
                     submitted_at=time.monotonic())


def _codes(stream, first=()) -> np.ndarray:
    return np.concatenate([chunk.codes for chunk in (*first, *read_all(stream))])


def _staggered(engine: Engine, prompts) -> list[np.ndarray]:
    """One stream starts alone; two more arrive once it is under way (steps in flight by then)."""
    first = engine.submit(_job("a", prompts[0], 11, (7, 5, 9)))
    early = read(first, 2)  # its first chunks are out: step-ahead has begun
    others = [engine.submit(_job("b", prompts[1], 12, (4, 11))), engine.submit(_job("c", prompts[2], 13, (13,)))]
    try:
        return [_codes(first, early), *(_codes(stream) for stream in others)]
    finally:
        engine.close()


def test_step_ahead_gives_the_codes_of_synchronous_steps(tiny_models, prompts):
    ahead_engine = _engine(tiny_models, static=True)
    assert ahead_engine._lookahead.step_ahead
    got = _staggered(ahead_engine, prompts)
    assert ahead_engine.runner.most_outstanding == 2  # the runs really stepped ahead
    sync_engine = _engine(tiny_models, static=True, step_ahead=False)
    assert not sync_engine._lookahead.step_ahead
    want = _staggered(sync_engine, prompts)
    assert sync_engine.runner.most_outstanding == 1
    plain = _staggered(_engine(tiny_models, static=False), prompts)  # eager runner: no launches ahead
    for frames, got_codes, want_codes, plain_codes in zip(((7, 5, 9), (4, 11), (13,)), got, want, plain):
        assert len(got_codes) == sum(frames)  # every segment ran to its cap
        np.testing.assert_array_equal(got_codes, want_codes)
        np.testing.assert_array_equal(got_codes, plain_codes)


def test_cancel_while_a_step_is_in_flight_leaves_the_others_and_the_slot_clean(tiny_models, prompts):
    engine = _engine(tiny_models, static=True)
    try:
        keep = engine.submit(_job("keep", prompts[0], 21, (30,)))
        drop = engine.submit(_job("drop", prompts[1], 22, (60,)))
        assert len(read(drop, 3)) == 3
        drop.cancel()
        kept = _codes(keep)
        assert wait_ended(drop) is StreamStatus.CANCELLED
        # The freed slot serves a new stream exactly as a fresh engine does.
        again = _codes(engine.submit(_job("again", prompts[2], 23, (12,))))
    finally:
        engine.close()
    fresh = _engine(tiny_models, static=True)
    try:
        want_keep = _codes(fresh.submit(_job("keep", prompts[0], 21, (30,))))
        want_again = _codes(fresh.submit(_job("again", prompts[2], 23, (12,))))
    finally:
        fresh.close()
    np.testing.assert_array_equal(kept, want_keep)
    np.testing.assert_array_equal(again, want_again)


class _ScriptedRunner:
    """The runner calls the step driver makes, recorded; every step goes on with zero codes."""

    can_step_ahead = True

    def __init__(self):
        self.launched: deque = deque()
        self.calls: list = []

    def launch(self, slots):
        ticket = (np.ones(len(slots), bool), np.zeros((len(slots), 16), np.int64))
        self.launched.append(ticket)
        self.calls.append(("launch", tuple(slots)))
        return ticket

    def collect(self, ticket, keep=None):
        assert self.launched.popleft() is ticket
        self.calls.append(("collect", tuple(keep)))
        return ticket

    def context_left(self, slot):
        return 100

    def drop_launched(self):
        self.launched.clear()


def test_a_step_in_flight_is_settled_when_no_stream_is_left_running(prompts):
    """Every stream's segment ended at the step just read while the next was already launched: the
    driver reads that step (dropping its frames) and launches nothing for no streams."""
    runner = _ScriptedRunner()
    live = {}
    for i in range(2):
        stream = _job(f"s{i}", prompts[i], i, (5,))
        stream.slot = i
        stream.first_audio_at = 0.0  # past their first chunks: step-ahead is on
        live[stream.id] = stream
    driver = Lookahead(runner, live)
    driver.generate()
    assert runner.calls == [("launch", (0, 1)), ("launch", (0, 1)), ("collect", (True, True))]
    for stream in live.values():
        stream.segment_done = True
    driver.generate()
    assert runner.calls[3:] == [("collect", (False, False))] and not runner.launched
    assert all(stream.num_pending == 1 for stream in live.values())  # only the first step's frame
