"""The static-shape (CUDA-graph) step on CPU, its pure helpers, and the multi-engine pool.

On CPU the static path runs the very functions the GPU captures, eagerly, so these tests pin its
semantics: same codes as the plain eager path and the reference vectors, batch == solo, slot reuse.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest
import torch

from bench.lib.drive import drive
from bench.lib.runners import static_runner
from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.cpu import EagerRunner
from tts_core.engine.cuda.buckets import (
    bucket_sizes,
    kv_columns,
    length_buckets,
    padded_step_input,
    pick_bucket,
)
from tts_core.engine.cuda.codec_passes import split_passes
from tts_core.engine.cuda.static_step import graphs_enabled
from tts_core.engine.engine import Engine
from tts_core.engine.idle import IdleSignal
from tts_core.engine.pool import EnginePool, route_order
from tts_core.engine.runner_types import build_runner
from tts_core.engine.stream import Segment, Stream
from tts_core.engine.types import EngineStats
from tts_core.errors import EngineStalledError, QueueFullError
from tts_core.loader import resolve_devices
from tts_core.model import lm_step

CASES = ["A_voice_clone_en", "B_voice_clone_zh", "C_continuation_prompted", "D_continuation_text_only"]
CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def models(tiny_models):
    return tiny_models


@pytest.fixture(scope="module")
def vectors(tiny_lm_vectors):
    return tiny_lm_vectors


# ---- pure helpers ---------------------------------------------------------------------------------


def test_bucket_sizes_cover_the_slots():
    assert bucket_sizes(1) == [1]
    assert bucket_sizes(4) == [1, 2, 4]
    assert bucket_sizes(5) == [1, 2, 4, 8]
    assert bucket_sizes(64) == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(ValueError):
        bucket_sizes(0)


def test_pick_bucket_is_the_smallest_that_holds_the_rows():
    buckets = [1, 2, 4, 8, 16, 32, 64]
    assert [pick_bucket(n, buckets) for n in (1, 2, 3, 5, 17, 64)] == [1, 2, 4, 8, 32, 64]
    with pytest.raises(ValueError):
        pick_bucket(65, buckets)


def test_split_passes_largest_first():
    assert split_passes(1, [1, 2, 4]) == [1]
    assert split_passes(7, [1, 2, 4]) == [4, 2, 1]
    assert split_passes(8, [1, 2, 4]) == [4, 4]
    assert split_passes(3, [1]) == [1, 1, 1]


def test_graphs_follow_the_one_eager_switch_and_the_device(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setenv("TTS_NO_CUDA_GRAPH", "1")  # retired: the environment no longer reaches the engine
    assert graphs_enabled(cuda, enforce_eager=False)
    assert not graphs_enabled(cuda, enforce_eager=True)
    assert not graphs_enabled(CPU, enforce_eager=False)


def test_padded_step_input_puts_each_slot_on_its_row():
    uniforms = np.arange(6, dtype=np.float32).reshape(2, 3)
    rows = padded_step_input([3, 0], uniforms, np.array([1.0, 0.0], np.float32), bucket=4)
    assert rows.shape == (4, 4)
    np.testing.assert_array_equal(rows[3], [0, 1, 2, 1])
    np.testing.assert_array_equal(rows[0], [3, 4, 5, 0])
    assert not rows[[1, 2]].any()  # padding rows: no uniforms, flag 0 (state untouched)


# ---- the static runner on CPU -----------------------------------------------------------------------


def _static(models, num_slots=8, **kwargs):
    return static_runner(models, num_slots, **kwargs)


def test_static_greedy_matches_reference_vectors_in_spread_slots(models, vectors):
    prompts = [vectors[f"{case}.input_ids"].numpy() for case in CASES]
    codes, _ = drive(_static(models), prompts, [0] * 4, [6, 1, 3, 0], SamplingParams.greedy())
    for case, got in zip(CASES, codes):
        np.testing.assert_array_equal(got, vectors[f"{case}.greedy.audio_token_ids"].numpy()[: len(got)])
        assert len(got) == 12


def test_static_sampled_equals_plain_eager_path(models, vectors):
    lm, codec = models
    prompts = [vectors[f"{case}.input_ids"].numpy() for case in CASES]
    plain = build_runner(lm, codec, num_slots=4, max_context_rows=600, device=CPU)
    assert isinstance(plain, EagerRunner)  # CPU default: the plain eager path
    want_codes, want_pcm = drive(plain, prompts, [1, 2, 3, 4], [0, 1, 2, 3], SamplingParams())
    got_codes, got_pcm = drive(_static(models), prompts, [1, 2, 3, 4], [0, 1, 2, 3], SamplingParams())
    for want, got in zip(want_codes, got_codes):
        np.testing.assert_array_equal(got, want)
    for want, got in zip(want_pcm, got_pcm):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_kv_columns_hold_every_row_and_a_scratch_column_rounded_to_16():
    assert kv_columns(240) == 256 and kv_columns(255) == 256 and kv_columns(256) == 272
    assert kv_columns(1) == 16


def test_the_gpu_suites_compile_warmup_compiles_over_a_runners_shapes(models, monkeypatch):
    """tests/support/warm_compile.py fills the compile caches for the GPU tests' first compiled
    runner (8 slots): only if it compiles over the batch buckets and KV columns that runner's
    start-up passes do its graphs match (the compile itself is recorded here, not run)."""
    from support.gpu_runners import MAX_ROWS
    from support.warm_compile import scratch_shapes

    from tts_core.engine.cuda import graphs

    seen = []
    monkeypatch.setattr(graphs, "compile_on_scratch", lambda lm, units, buckets, rope_len, *rest: seen.append(
        (list(buckets), rope_len)))
    static_runner(models, 8, max_context_rows=MAX_ROWS, traced=True)
    assert seen == [scratch_shapes(8, MAX_ROWS)]


def test_length_buckets_are_powers_of_two_then_the_cache_length():
    assert length_buckets(608) == [128, 256, 512, 608]
    assert length_buckets(2064) == [128, 256, 512, 1024, 2048, 2064]
    assert length_buckets(100) == [100]


def test_streams_crossing_length_buckets_equal_the_plain_eager_path(models, vectors):
    """A short prompt (86 rows) grows past the 128-column bucket while a long one (210 rows) sits in
    the 256 bucket and crosses into 512: attention restricted to a bucket must change nothing."""
    lm, codec = models
    prompts = [vectors["D_continuation_text_only.input_ids"].numpy(), vectors["C_continuation_prompted.input_ids"].numpy()]
    plain = EagerRunner(lm, codec, num_slots=2, max_context_rows=600, device=CPU)
    want, _ = drive(plain, prompts, [5, 6], [0, 1], SamplingParams(), frames=60)
    static = _static(models, num_slots=2)
    assert static.graphs.lengths_buckets == [128, 256, 512, 608]
    got, _ = drive(static, prompts, [5, 6], [0, 1], SamplingParams(), frames=60)
    for w, g in zip(want, got):
        assert len(g) > 128 - 86  # really crossed the first bucket
        np.testing.assert_array_equal(g, w)


@pytest.mark.slow  # compiles the step (aot_eager) in the background
def test_deferred_compile_serves_at_once_and_switches_without_changing_codes(models, vectors):
    prompt = vectors["A_voice_clone_en.input_ids"].numpy()
    runner = static_runner(models, 2, traced=True, defer=True)
    engine = Engine(runner, EngineConfig(max_active_streams=2, max_queue=4))
    try:
        first = _collect_codes(engine.submit(_job(prompt, 11, 20)))  # on whichever step is current
        deadline = time.monotonic() + 300
        while runner.step_kind != "compiled" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runner.step_kind == "compiled"
        second = _collect_codes(engine.submit(_job(prompt, 11, 20)))
    finally:
        engine.close()
    want, _ = drive(_static(models, num_slots=2), [prompt], [11], [0], SamplingParams(), frames=20)
    np.testing.assert_array_equal(first, want[0])
    np.testing.assert_array_equal(second, want[0])


def _job(rows, seed, frames):
    return Stream(stream_id=f"job-{seed}-{time.monotonic_ns()}", segments=(Segment(rows=rows, max_frames=frames),),
                     sampling=SamplingParams(), seed=seed, submitted_at=time.monotonic())


def _collect_codes(stream) -> np.ndarray:
    codes = [code for chunk in stream for code in chunk.codes]
    return np.array(codes, dtype=np.int64).reshape(-1, 16)


@pytest.mark.parametrize("params", [SamplingParams.greedy(), SamplingParams()], ids=["greedy", "sampled"])
def test_compiled_step_units_equal_the_plain_step(models, vectors, params):
    """The step's units traced by torch.compile (whole-graph, with the aot_eager backend: the graphs
    CUDA compiles, run without inductor) give the plain step's codes, in every bucket."""
    prompts = [vectors[f"{case}.input_ids"].numpy() for case in CASES]
    plain = _static(models)
    assert plain.graphs.compile_mode == "off" and plain.graphs.units is lm_step.EAGER  # CPU default
    traced = _static(models, traced=True)
    assert traced.graphs.compile_mode == "aot_eager" and traced.graphs.units is not lm_step.EAGER
    want, want_pcm = drive(plain, prompts, [3, 4, 5, 6], [6, 1, 3, 0], params)
    got, got_pcm = drive(traced, prompts, [3, 4, 5, 6], [6, 1, 3, 0], params)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    for w, g in zip(want_pcm, got_pcm):
        np.testing.assert_allclose(g, w, atol=1e-5)
    alone, _ = drive(traced, prompts[:1], [3], [0], params)  # bucket 1
    np.testing.assert_array_equal(alone[0], want[0])


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_static_batch_equals_solo(models, vectors, batch_invariant):
    prompts = [vectors[f"{case}.input_ids"].numpy() for case in CASES]
    together, _ = drive(_static(models, batch_invariant=batch_invariant), prompts, [7, 8, 9, 10],
                         [2, 5, 0, 7], SamplingParams())
    for i, prompt in enumerate(prompts):
        alone, _ = drive(_static(models, batch_invariant=batch_invariant), [prompt], [7 + i], [0],
                          SamplingParams())
        np.testing.assert_array_equal(alone[0], together[i])


def test_static_slot_reuse_after_release_starts_clean(models, vectors):
    prompts = [vectors[f"{case}.input_ids"].numpy() for case in CASES]
    runner = _static(models, num_slots=2)
    # A stream runs 5 frames in slot 1 and is cancelled (released) mid-way.
    drive(runner, [prompts[0]], [3], [1], SamplingParams(), frames=5)
    runner.release(1)
    reused, reused_pcm = drive(runner, [prompts[1]], [4], [1], SamplingParams())
    fresh, fresh_pcm = drive(_static(models, num_slots=2), [prompts[1]], [4], [1], SamplingParams())
    np.testing.assert_array_equal(reused[0], fresh[0])
    np.testing.assert_array_equal(reused_pcm[0], fresh_pcm[0])


def test_static_runner_refuses_prompts_over_the_context(models, vectors):
    runner = _static(models, num_slots=1)
    runner.begin_stream(0, SamplingParams(), 0)
    with pytest.raises(ValueError, match="max_context_rows"):
        runner.start_segment(0, np.zeros((601, 17), np.int64), None)


# ---- the pool -----------------------------------------------------------------------------------------


def test_route_order_least_loaded_first_stable():
    assert route_order([3, 1, 2, 1]) == [1, 3, 2, 0]  # the tie between engines 1 and 3 keeps their order
    assert route_order([0, 0, 0]) == [0, 1, 2]
    assert EngineStats(active_streams=2, queued=3, max_active_streams=4, max_queue=4, submitted=5, finished=0,
                       cancelled=0, refused=0, stalled=False).load == 5


class _FakeEngine:
    def __init__(self, active, queued, full=False, stalled=False):
        self.active, self.queued, self.full, self.jobs, self.cancels = active, queued, full, [], 0
        self.stalled = stalled
        self.idle = IdleSignal()

    def stats(self):
        return EngineStats(active_streams=self.active, queued=self.queued, max_active_streams=4, max_queue=2,
                           submitted=len(self.jobs), finished=0, cancelled=self.cancels, refused=0,
                           stalled=self.stalled)

    def admit(self, stream):
        if self.stalled:
            raise EngineStalledError("the GPU stopped responding")
        if self.full:
            raise QueueFullError("full", retry_after_s=1.0)
        self.jobs.append(stream.id)
        self.active += 1

    def attach_intake(self, intake):
        pass

    def close(self, timeout_s=5.0):
        pass


def _named(name: str) -> Stream:
    return Stream(stream_id=name, segments=(), sampling=SamplingParams(), seed=0, submitted_at=0.0)


def test_pool_routes_to_least_loaded_and_skips_full_engines():
    engines = [_FakeEngine(2, 0), _FakeEngine(0, 0), _FakeEngine(1, 0)]
    pool = EnginePool(engines)
    for name in "abc":  # loads 2,0,1 -> a to 1; 2,1,1 -> b to 1 (tie: first); 2,2,1 -> c to 2
        pool.admit(_named(name))
    assert [e.jobs for e in engines] == [[], ["a", "b"], ["c"]]
    pool.admit(_named("d"))  # loads 2,2,2: a three-way tie goes to the first engine
    assert [e.jobs for e in engines] == [["d"], ["a", "b"], ["c"]]
    engines[0].active, engines[1].active = 4, 1  # loads 4,1,2
    engines[1].full = True
    pool.admit(_named("e"))  # engine 1 is least loaded but full: the next least loaded, engine 2, takes it
    assert [e.jobs for e in engines] == [["d"], ["a", "b"], ["c", "e"]]
    for e in engines:
        e.full = True
    with pytest.raises(QueueFullError):
        pool.admit(_named("f"))
    assert [e.jobs for e in engines] == [["d"], ["a", "b"], ["c", "e"]]
    stats = pool.stats()
    assert stats.engines == 3 and stats.active_streams == sum(e.active for e in engines) == 8


def _job(rows, seed, frames=8):
    return Stream(stream_id=f"job-{seed}-{time.monotonic_ns()}", segments=(Segment(rows=rows, max_frames=frames),),
                     sampling=SamplingParams(), seed=seed, submitted_at=time.monotonic())


def _collect(stream):
    return np.array([code for chunk in stream for code in chunk.codes])


def test_pool_of_cpu_engines_spreads_streams_and_matches_one_engine(models, vectors):
    rows = vectors["A_voice_clone_en.input_ids"].numpy()

    def engine(slots):
        # Each engine owns its models (a model is driven by one engine thread only).
        lm, codec = copy.deepcopy(models[0]), copy.deepcopy(models[1])
        runner = EagerRunner(lm, codec, num_slots=slots, max_context_rows=600, device=CPU)
        return Engine(runner, EngineConfig(max_active_streams=slots, max_queue=4))

    single = engine(2)
    want = [_collect(single.submit(_job(rows, seed))) for seed in range(4)]
    single.close()
    pool = EnginePool([engine(1), engine(1)])
    streams = [pool.submit(_job(rows, seed)) for seed in range(4)]
    got = [_collect(s) for s in streams]
    assert [e.stats().submitted for e in pool.engines] == [2, 2]  # alternating: least loaded first
    assert pool.stats().finished == 4
    pool.close()
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_resolve_devices_on_cpu():
    assert resolve_devices("cpu", None) == [CPU]
    assert resolve_devices("auto", "cpu") == [CPU]
    with pytest.raises(ValueError):
        resolve_devices("cpu", "cpu,cpu")


@pytest.mark.parametrize("rows, forget", [
    ([1], lambda state: state.reset_row(1)),  # slice fills, one row
    ([1, 3], lambda state: state.reset_rows(torch.tensor([3, 1]))),  # index fills, the rows admitted together
])
def test_codec_row_resets_equal_reset_of_those_rows(models, rows, forget):
    _, codec = models
    states = [codec.new_decode_state(4), codec.new_decode_state(4)]
    codes = torch.randint(0, 1024, (4, 16, 2), generator=torch.Generator().manual_seed(0))
    for state in states:
        codec.decode_step(codes, state)
    states[0].reset(rows)
    forget(states[1])
    for a, b in zip(states[0].stages, states[1].stages):
        for x, y in zip((a.positions, a.offsets, *a.keys, *a.values), (b.positions, b.offsets, *b.keys, *b.values)):
            assert torch.equal(x, y)
    assert int(states[1].stages[0].offsets[0]) > 0  # other rows untouched


def test_static_multi_frame_decode_matches_plain_path(models):
    lm, codec = models
    plain = EagerRunner(lm, codec, num_slots=3, max_context_rows=64, device=CPU)
    static = _static(models, num_slots=3)
    codes = np.random.default_rng(0).integers(0, 1024, (2, 23, 16))
    for runner in (plain, static):
        for slot in (0, 2):
            runner.begin_stream(slot, SamplingParams(), 0)
    # Calls of 1, 7 and 15 frames: passes of 4/2/1 frames on the static path.
    outs = {name: [r.decode([2, 0], codes[:, a:b]) for a, b in ((0, 1), (1, 8), (8, 23))]
            for name, r in (("plain", plain), ("static", static))}
    for want, got in zip(outs["plain"], outs["static"]):
        assert len(got) == len(want) == 2  # one array per slot, in the order asked
        for got_row, want_row in zip(got, want):
            assert got_row.shape == want_row.shape
            np.testing.assert_allclose(got_row, want_row, atol=1e-5)


def test_pool_routes_around_a_stalled_engine_and_stalls_only_with_all():
    """One GPU stuck (`engine/stall.py`) leaves the others serving: the pool skips it and is not
    stalled; a refusal prefers "busy, retry" while any engine still serves."""
    stuck, busy, free = _FakeEngine(0, 0, stalled=True), _FakeEngine(1, 0, full=True), _FakeEngine(3, 0)
    pool = EnginePool([stuck, busy, free])
    pool.admit(_named("job"))
    assert free.jobs == ["job"]
    assert pool.stats().stalled is False and pool.stats().stalled_engines == 1
    free.full = True
    with pytest.raises(QueueFullError):
        pool.admit(_named("job 2"))
    pool = EnginePool([_FakeEngine(0, 0, stalled=True), _FakeEngine(0, 0, stalled=True)])
    with pytest.raises(EngineStalledError):
        pool.admit(_named("job 3"))
    assert pool.stats().stalled is True
