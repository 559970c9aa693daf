"""GPU only (skipped without CUDA): CUDA-graphed step == eager step, batch == solo on CUDA,
cancellation and slot reuse under graphs.

Full-size models from the real configs with random weights (as the bench), plus the tiny parity
checkpoint. Timings belong to the bench: nothing here asserts one.
"""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from support.gpu_runners import CUDA, build_runner
from support.streams import read, wait_ended

from bench.lib.drive import drive
from bench.lib.models import make_prompt
from bench.lib.runners import Synchronous
from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.cuda.static_runner import StaticRunner
from tts_core.engine.engine import Engine
from tts_core.engine.stream import Segment, Stream, StreamStatus
from tts_core.model import fused_ops, lm_step
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CASES = ["A_voice_clone_en", "B_voice_clone_zh", "C_continuation_prompted", "D_continuation_text_only"]


def _runner(models, num_slots, **kwargs) -> StaticRunner:
    return build_runner(models, num_slots, **kwargs)


def test_graphed_equals_eager_bf16(runners, prompts):
    """The production precision: replayed CUDA graphs give the eager run's codes and audio. (Plain
    step units: compiling is what the fp32 tests below are about.)"""
    graphed = runners(torch.bfloat16, 8, compile="off")
    eager = runners(torch.bfloat16, 8, compile="off", enforce_eager=True)
    assert graphed.uses_graphs and not eager.uses_graphs
    slots = [0, 2, 3, 5, 6, 7]
    args = (prompts[:6], [11, 12, 13, 14, 15, 16], slots, SamplingParams())
    want_codes, want_pcm = drive(eager, *args, frames=16)
    got_codes, got_pcm = drive(graphed, *args, frames=16)
    for want, got in zip(want_codes, got_codes):
        assert len(got) == 16
        np.testing.assert_array_equal(got, want)
    worst = max(float(np.abs(g - w).max()) for g, w in zip(got_pcm, want_pcm))
    assert worst <= 1e-5, f"graphed vs eager PCM max |diff| = {worst:.3g}"


@pytest.mark.compiles
def test_compile_on_by_default_and_off_when_asked(runners):
    assert runners(torch.float32, 8).graphs.compile_mode == "inductor"
    assert runners(torch.float32, 8).graphs.units is not lm_step.EAGER  # compiled and warmed without falling back
    runner = runners(torch.float32, 8, compile="off")
    assert runner.graphs.compile_mode == "off" and runner.graphs.units is lm_step.EAGER


def test_fused_kernels_build_and_serve_on_this_gpu(runners):
    """The start-up warm-up built every fused kernel (nothing turned them off), and the step uses them."""
    runner = runners(torch.bfloat16, 8, compile="off")
    assert fused_ops.disabled_reason() is None and fused_ops.fused_enabled(CUDA)
    assert runner.uses_graphs


@torch.inference_mode()
def test_ring_kernel_codec_equals_sdpa_codec_on_this_gpu(full_models):
    """The full-size fp32 codec with the Triton ring attention (TF32x3 products on tensor cores)
    against PyTorch's fp32 SDPA, 4-frame passes over 24 rows until every ring has wrapped: the
    audio agrees to fp32 rounding (SNR >= 100 dB), and the rings hold the same positions."""
    _, codec = full_models(torch.bfloat16)
    states = [codec.new_decode_state(24, CUDA) for _ in range(2)]
    generator = torch.Generator(device=CUDA).manual_seed(3)
    signal = noise = 0.0
    for _ in range(140):  # 560 frames, 44.8 s: past the longest window (10 s)
        active = torch.rand(24, device=CUDA, generator=generator) > 0.1
        codes = torch.randint(0, 1024, (24, 16, 4), device=CUDA, generator=generator)
        want = codec.decode_frames_static(codes, states[0], active)
        got = codec.decode_frames_static(codes, states[1], active, attention="ring_kernel")
        signal += float(want.double().pow(2).sum())
        noise += float((got.double() - want.double()).pow(2).sum())
    assert 10 * np.log10(signal / max(noise, 1e-300)) >= 100
    for a, b in zip(states[0].stages, states[1].stages):
        assert torch.equal(a.positions, b.positions) and torch.equal(a.offsets, b.offsets)
    assert int(states[1].stages[-1].offsets.min()) > states[1].stages[-1].capacity


@pytest.mark.compiles
def test_compiled_step_equals_per_op_step_fp32(runners, prompts):
    """Compiled fused units vs the per-op step, both graphed, greedy, fp32: identical codes and PCM.
    (In bf16 the fused kernels round differently, so codes may differ: `bench/engine/gpu_checks.py`
    measures that agreement; nothing about it is asserted.)"""
    slots = [0, 2, 3, 5, 6, 7]
    args = (prompts[:6], [21, 22, 23, 24, 25, 26], slots, SamplingParams.greedy())
    want, want_pcm = drive(runners(torch.float32, 8, compile="off"), *args, frames=16)
    got, got_pcm = drive(runners(torch.float32, 8), *args, frames=16)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    worst = max(float(np.abs(g - w).max()) for g, w in zip(got_pcm, want_pcm))
    assert worst <= 1e-4, f"compiled vs per-op PCM max |diff| = {worst:.3g}"



@pytest.mark.compiles
@torch.inference_mode()
def test_burst_after_a_cached_prefix_compiled_equals_per_op_fp32(full_models, runners, prompts):
    """A burst of one voice's prompts (a shared 150-row prefix, texts of several lengths) takes the
    compiled after-prefix prefill; greedy fp32 codes and PCM are the per-op runner's."""
    models = full_models(torch.float32)
    prefix = make_prompt(models[0].config, 200, seed=99)[:150]
    burst = [np.concatenate([prefix, p[-(20 + 3 * i):]]) for i, p in enumerate(prompts[1:7])]
    slots = [0, 2, 3, 5, 6, 7]
    results = []
    for kwargs in ({"compile": "off"}, {}):
        runner = runners(torch.float32, 8, **kwargs)
        assert runner.warm_prefix(prefix)
        hits = runner.prefix_cache.hits
        results.append(drive(runner, burst, list(range(6)), slots, SamplingParams.greedy(), frames=12, prefix_rows=150))
        assert runner.prefix_cache.hits - hits == len(slots)
    (want, want_pcm), (got, got_pcm) = results
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    worst = max(float(np.abs(g - w).max()) for g, w in zip(got_pcm, want_pcm))
    assert worst <= 1e-4, f"compiled vs per-op PCM max |diff| = {worst:.3g}"


def test_tiny_checkpoint_greedy_matches_reference_graphed_fp32(parity_dir):
    lm = load_lm(parity_dir / "tiny_lm", device=CUDA, dtype=torch.float32)
    codec = load_codec(parity_dir / "tiny_codec", device=CUDA)
    vectors = load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))
    runner = _runner((lm, codec), 4, compile="off")  # graphed, fused kernels; compiled == per-op: below
    assert runner.uses_graphs
    rows = [vectors[f"{case}.input_ids"].numpy() for case in CASES]
    codes, _ = drive(runner, rows, [0] * 4, [3, 0, 2, 1], SamplingParams.greedy())
    for case, got in zip(CASES, codes):
        np.testing.assert_array_equal(got, vectors[f"{case}.greedy.audio_token_ids"].numpy())


@pytest.mark.parametrize(("dtype", "batch_invariant"), [pytest.param(torch.float32, False, marks=pytest.mark.compiles),
                                                         (torch.bfloat16, True)])
def test_batch_equals_solo(runners, prompts, dtype, batch_invariant):
    """fp32 with batch-size buckets, and bf16 in the batch-invariant mode: exactly equal codes."""
    options = {"batch_invariant": True, "compile": "off"} if batch_invariant else {}
    runner = runners(dtype, 8 if not batch_invariant else 4, **options)
    assert runner.uses_graphs
    slots = [slot for slot in (1, 4, 5, 7, 0, 2, 3, 6) if slot < runner.num_slots]  # every slot, mixed order
    seeds = [100 + i for i in range(len(slots))]
    together, _ = drive(runner, prompts[: len(slots)], seeds, slots, SamplingParams(), frames=20)
    for i in (0, len(slots) // 2, len(slots) - 1):
        alone, _ = drive(runner, [prompts[i]], [seeds[i]], [0], SamplingParams(), frames=20)
        np.testing.assert_array_equal(alone[0], together[i])


def _job(rows, seed, frames, sampling: SamplingParams | None = None):
    return Stream(stream_id=f"gpu-{seed}-{time.monotonic_ns()}", segments=(Segment(rows=rows, max_frames=frames),),
                  sampling=sampling or SamplingParams(), seed=seed)


def _collect(stream, audio: list | None = None) -> np.ndarray:
    """A stream's codes [n, 16]; its chunks' audio goes to `audio` when given."""
    codes = []
    for chunk in stream:
        codes.extend(chunk.codes)
        if audio is not None:
            audio.append(chunk.pcm)
    return np.array(codes, dtype=np.int64).reshape(-1, 16)


def _snr_db(want: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.sum((want.astype(np.float64) - got) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(want.astype(np.float64) ** 2)) / noise)


def test_cancellation_and_slot_reuse_under_graphs(runners, prompts):
    # Four slots, four streams: the fifth request must wait for the cancelled stream's slot.
    runner = runners(torch.bfloat16, 4, batch_invariant=True, compile="off")
    assert runner.uses_graphs
    engine = Engine(runner, EngineConfig(max_active_streams=4, max_queue=4))
    try:
        handles = [engine.submit(_job(prompts[i], 200 + i, 60)) for i in range(4)]
        assert len(read(handles[1], 1)) == 1  # stream 1 is playing: cancel it mid-way
        handles[1].cancel()
        reuse = engine.submit(_job(prompts[5], 205, 30))  # waits, then takes the freed slot
        kept = [_collect(handles[0]), _collect(handles[2]), _collect(handles[3])]
        reused = _collect(reuse)
        assert wait_ended(handles[1]) is StreamStatus.CANCELLED
        assert engine.stats().cancelled == 1
        # Every stream equals the same request run alone afterwards (slot state fully reset).
        for index, seed, frames, got in ((0, 200, 60, kept[0]), (2, 202, 60, kept[1]), (3, 203, 60, kept[2]),
                                         (5, 205, 30, reused)):
            alone = _collect(engine.submit(_job(prompts[index], seed, frames)))
            np.testing.assert_array_equal(got, alone)
    finally:
        engine.close()


def _engine_run(runners, dtype, jobs, audio: list | None = None, **config) -> list[np.ndarray]:
    """Each job's codes (and, into `audio`, each job's whole audio [2, S]), and the runner."""
    runner = runners(dtype, 4, **config.pop("runner", {}))
    step_ahead = config.pop("step_ahead", True)
    engine = Engine(runner if step_ahead else Synchronous(runner), EngineConfig(max_active_streams=4, max_queue=8,
                                                                                 **config))
    try:
        handles = [engine.submit(job) for job in jobs]
        chunks = [[] for _ in handles]
        codes = [_collect(handle, pieces) for handle, pieces in zip(handles, chunks)]
        if audio is not None:
            audio.extend(np.concatenate(pieces, axis=1) for pieces in chunks)
        return codes, runner
    finally:
        engine.close()


@pytest.mark.compiles
def test_lm_and_codec_graphs_are_captured_on_streams_of_their_own(runners):
    """Codec replays run on their own stream while LM replays run: the two kinds of graph must not
    share the cuBLAS workspace torch keys by capture stream (with one capture stream, 64 streams
    with the compiled step and step-ahead hung in their first second, 3 runs of 3, H200)."""
    runner = runners(torch.float32, 8)
    streams = runner.graphs.capture_streams
    assert set(streams) == {"lm", "codec"}
    assert streams["lm"].cuda_stream != streams["codec"].cuda_stream


def test_capture_survives_dead_graphs_in_reference_cycles(full_models, monkeypatch):
    """A garbage collection that destroys a dead CUDA graph during a capture invalidates the capture
    (seen on the H200: the 64-slot runner failed to build after earlier tests had dropped graphed
    runners). Here every capture begins by dropping a small captured graph into a fresh reference
    cycle and allocating enough to trigger a collection; the runner must still be built, and no
    collection may start while a capture is open."""
    x = torch.zeros(1, device=CUDA)
    spare = []
    for _ in range(4):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            x.add_(1)
        spare.append(graph)
    capturing, collected_inside = [False], []

    class Cycle:
        def __init__(self, graph) -> None:
            self.me, self.graph = self, graph

    begin, end = torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.capture_end

    def capture_begin(graph, *args, **kwargs):
        begin(graph, *args, **kwargs)
        capturing[0] = True
        if spare:
            Cycle(spare.pop())  # garbage at once: only the cyclic collector frees it
        alive = [[] for _ in range(5000)]  # far past the collector's threshold (700 live objects)
        del alive

    def capture_end(graph):
        capturing[0] = False
        end(graph)

    def on_gc(phase, info):
        if phase == "start" and capturing[0]:
            collected_inside.append(info["generation"])

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", capture_begin)
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", capture_end)
    gc.callbacks.append(on_gc)
    try:
        # Built here, as plain units (no compile): the captures themselves are tested.
        runner = _runner(full_models(torch.float32), 2, compile="off")
    finally:
        gc.callbacks.remove(on_gc)
    assert runner.uses_graphs and not spare
    assert collected_inside == []


@pytest.mark.compiles
@pytest.mark.timeout(900)
def test_64_callers_on_the_servers_gpu_path_all_finish(full_models, prompts):
    """What the bench's 64-stream level does, as the server runs it: compiled step, CUDA graphs,
    step-ahead, codec replays on their own stream, 64 caller threads at once, twice. Before the LM
    and codec graphs had capture streams of their own this hung in the first second (H200, 3 of 3);
    the stall watch turns a hang into a failure here."""
    runner = _runner(full_models(torch.float32), 64)
    assert runner.uses_graphs and runner.graphs.compile_mode == "inductor" and runner.can_step_ahead
    engine = Engine(runner, EngineConfig(max_active_streams=64, max_queue=0, stall_timeout_s=60))
    try:
        for round_ in range(2):
            frames = [0] * 64  # a caller that failed leaves its 0

            def caller(i: int, seed: int, frames: list = frames) -> None:
                frames[i] = len(_collect(engine.submit(_job(prompts[i % len(prompts)], seed, 24))))

            threads = [threading.Thread(target=caller, args=(i, 1000 * round_ + i)) for i in range(64)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
            assert not any(thread.is_alive() for thread in threads), "callers still waiting after 300 s"
            assert all(1 <= n <= 24 for n in frames), frames
            assert not engine.stats().stalled
    finally:
        engine.close()


def test_codec_on_its_own_stream_changes_nothing(runners, prompts):
    """The pipelined engine (codec replays on a second CUDA stream, overlapping the next LM step)
    gives the serial engine's codes, and its audio. Batch-invariant runners: the two engines may
    admit the three requests in different waves (a race with the submitting thread), which must not
    matter here. The audio is compared by SNR, not bit for bit: chunk sizes follow the wall clock,
    and a different split into codec passes rounds differently; two replays racing for one cuBLAS
    workspace would corrupt it far below this bound."""
    jobs = [_job(prompts[i], 300 + i, 40) for i in range(3)]
    serial_audio, pipelined_audio = [], []
    serial, _ = _engine_run(runners, torch.bfloat16, jobs, serial_audio, pipeline_codec=False,
                            runner={"batch_invariant": True, "compile": "off"})
    jobs = [_job(prompts[i], 300 + i, 40) for i in range(3)]
    pipelined, _ = _engine_run(runners, torch.bfloat16, jobs, pipelined_audio, pipeline_codec=True,
                               runner={"batch_invariant": True, "compile": "off"})
    for want, got in zip(serial, pipelined):
        np.testing.assert_array_equal(got, want)
    for want, got in zip(serial_audio, pipelined_audio):
        assert want.shape == got.shape
        assert _snr_db(want, got) >= 80, _snr_db(want, got)


def test_step_ahead_changes_no_codes_under_graphs(runners, prompts):
    """Graphed engines with and without step-ahead (a step launched before the one before is read):
    streams of two segments with caps of different lengths give the same codes. Batch-invariant
    runners, so the arrival timing (which differs between the two) cannot change a stream's codes."""
    def jobs():
        return [Stream(stream_id=f"ahead-{i}-{time.monotonic_ns()}", sampling=SamplingParams(), seed=400 + i,
                          segments=(Segment(rows=prompts[i], max_frames=9 + 5 * i, pause_after_s=0.05),
                                    Segment(rows=prompts[i + 3], max_frames=12)))
                for i in range(3)]

    ahead, runner = _engine_run(runners, torch.bfloat16, jobs(), runner={"batch_invariant": True, "compile": "off"})
    assert runner.graphs.use_graphs
    synchronous, _ = _engine_run(runners, torch.bfloat16, jobs(), runner={"batch_invariant": True, "compile": "off"}, step_ahead=False)
    for i, (got, want) in enumerate(zip(ahead, synchronous)):
        assert len(got) == 9 + 5 * i + 12
        np.testing.assert_array_equal(got, want)


@pytest.mark.compiles
def test_deferred_compile_switches_to_graphs_without_changing_codes(full_models, prompts):
    models = full_models(torch.float32)
    runner = _runner(models, 4, defer=True)
    assert runner.step_kind == "plain"  # serves at once, on the plain ops while the kernels build
    assert not fused_ops.fused_enabled(CUDA) and fused_ops.planned(CUDA)
    engine = Engine(runner, EngineConfig(max_active_streams=4, max_queue=8))
    greedy = SamplingParams.greedy()  # compiled and plain fp32 kernels round differently: only argmax is exact
    try:
        before = _collect(engine.submit(_job(prompts[0], 400, 30, greedy)))
        deadline = time.monotonic() + 600
        while runner.step_kind != "compiled+graphs" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert runner.step_kind == "compiled+graphs"
        assert fused_ops.fused_enabled(CUDA)  # released at the switch
        after = _collect(engine.submit(_job(prompts[0], 400, 30, greedy)))
    finally:
        engine.close()
    np.testing.assert_array_equal(before, after)
