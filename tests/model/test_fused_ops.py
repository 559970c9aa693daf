"""The fused GPU kernels (`model/fused_ops.py`) against the plain step they replace.

Without a GPU the kernels run in Triton's interpreter on CPU tensors (conftest sets
TRITON_INTERPRET=1), so CI checks their math; `test_gpu_engine.py` checks them compiled and
graphed on a GPU.
"""

from __future__ import annotations

import itertools
import platform
import threading

import numpy as np
import pytest
import torch

from tts_core.config import SamplingParams
from tts_core.engine.sampler import packed_batch, param_row
from tts_core.model import fused_ops, ring_kernel
from tts_core.model.kv_cache import KVCache, StaticDecodeAttender, attend_local
from tts_core.model.sampling import apply_repetition_penalty, pick_codes

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# Triton has wheels for Linux x86_64 only; elsewhere these tests cannot run (and CI is Linux x86_64).
pytestmark = pytest.mark.skipif(not fused_ops.available() and not (platform.system() == "Linux"
                                and platform.machine() == "x86_64"), reason="Triton has no wheel here")


def _params() -> list[SamplingParams]:
    """Every mix of the filters: top-k off / 1 / default / beyond the vocabulary, top-p off / tight /
    default, with and without the penalty, greedy and sampled."""
    grid = itertools.product([0.8, 1.7], [0, 1, 25, 2000], [0.3, 0.95, 1.0], [1.0, 1.2], [True, False])
    return [SamplingParams(do_sample=s, audio_temperature=t, audio_top_k=k, audio_top_p=p, audio_repetition_penalty=r)
            for t, k, p, r, s in grid]


def _batch(params: list[SamplingParams], vocab: int, generator: torch.Generator):
    rows = len(params)
    table = torch.tensor([param_row(p, vocab) for p in params], device=DEVICE)
    step_in = torch.rand(rows, 18, generator=generator).to(DEVICE)  # uniforms | step flag, as the static step
    seen = (torch.rand(rows, 16, vocab, generator=generator) < 0.05).to(DEVICE)
    return packed_batch(table, step_in[:, :-1], seen, vocab)


def _fused(logits, seen, uniforms, sampling):
    audio = sampling.audio
    return fused_ops.pick_code(logits, seen, uniforms, sampling.do_sample, audio.temperature, audio.kth_index,
                               audio.top_p, sampling.audio_repetition_penalty)


def _check_pick(params: list[SamplingParams], vocab: int, seed: int, dtype: torch.dtype = torch.float32) -> None:
    """Fused and plain picks from one codebook's strided views, as the step passes them. Equal codes,
    except that equal scores may be ordered differently (bf16 logits tie often): then the picked
    scores are equal."""
    generator = torch.Generator().manual_seed(seed)
    sampling = _batch(params, vocab, generator)
    logits = (3 * torch.randn(len(params), vocab, generator=generator)).to(DEVICE, dtype)
    seen, uniforms = sampling.seen[:, 7], sampling.uniforms[:, 8]  # non-contiguous views
    want = pick_codes(logits.float(), seen, uniforms, sampling)
    got = _fused(logits, seen, uniforms, sampling)
    assert got.dtype == torch.int64
    scores = apply_repetition_penalty(logits.float(), seen, sampling.audio_repetition_penalty)
    assert torch.equal(scores.gather(1, got[:, None]), scores.gather(1, want[:, None]))
    if dtype == torch.float32:
        assert torch.equal(got, want), (got != want).nonzero().flatten().tolist()


# The interpreter sorts slowly (about a second per 1,024-wide row): the full grid of filters runs on
# small vocabularies (one of them not a power of two), a few rows on the real width.
@pytest.mark.slow
@pytest.mark.parametrize("vocab", [64, 37])
def test_pick_code_equals_the_plain_pick(vocab):
    _check_pick(_params(), vocab, seed=vocab)


@pytest.mark.slow
def test_pick_code_equals_the_plain_pick_at_full_width():
    _check_pick([SamplingParams(), SamplingParams(audio_top_k=0), SamplingParams(audio_top_p=1.0),
                 SamplingParams(do_sample=False)], 1024, seed=3)


def test_pick_code_reads_bf16_logits():
    _check_pick(_params()[::2], 64, seed=5, dtype=torch.bfloat16)


def test_ties_are_kept_by_top_k_and_drawn_in_id_order():
    """Scores [5, 3, 3, 3, 1, ...] with top-k 2: the k-th score ties with two more, all three are
    kept (4 entries in all), and equal scores are drawn in ascending id order."""
    vocab = 64
    logits = torch.full((1, vocab), 1.0)
    logits[0, :4] = torch.tensor([5.0, 3.0, 3.0, 3.0])
    logits[0, 10] = 3.0  # a tie far from the others
    probs = torch.softmax(torch.tensor([5.0, 3.0, 3.0, 3.0, 3.0]), dim=0)
    edges = torch.cumsum(probs, 0)
    params = SamplingParams(audio_temperature=1.0, audio_top_k=2, audio_top_p=1.0, audio_repetition_penalty=1.0)
    sampling = _batch([params], vocab, torch.Generator().manual_seed(0))
    seen = torch.zeros(1, vocab, dtype=torch.bool, device=DEVICE)
    starts = torch.cat([torch.zeros(1), edges[:-1]])
    for want, u in zip([0, 1, 2, 3, 10], ((starts + edges) / 2).tolist()):
        uniforms = torch.tensor([u], device=DEVICE)
        assert _fused(logits.to(DEVICE), seen, uniforms, sampling).item() == want


def test_greedy_rows_take_the_first_maximum_after_the_penalty():
    vocab = 128
    logits = torch.zeros(2, vocab)
    logits[:, 9] = logits[:, 40] = 2.0  # a tie: the lower id wins
    logits[1, 3] = 2.2  # seen: 2.2 / 1.2 < 2.0, so the penalty hands row 1 back to id 9
    params = [SamplingParams(do_sample=False, audio_repetition_penalty=1.2)] * 2
    sampling = _batch(params, vocab, torch.Generator().manual_seed(1))
    seen = torch.zeros(2, vocab, dtype=torch.bool)
    seen[1, 3] = True
    got = _fused(logits.to(DEVICE), seen.to(DEVICE), sampling.uniforms[:, 1], sampling)
    assert got.tolist() == [9, 9]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_local_attention_equals_the_plain_attention(dtype, monkeypatch):
    """Position by position over a whole frame: same outputs (to rounding) and identical caches."""
    monkeypatch.setattr(fused_ops, "_disabled", "test: the plain path")  # attend_local: the plain path, on a GPU too
    generator = torch.Generator().manual_seed(2)
    batch, heads, positions, dim = 3, 4, 17, 16
    plain_k = torch.zeros(batch, heads, positions, dim, dtype=dtype, device=DEVICE)
    plain_v = torch.zeros_like(plain_k)
    fused_k, fused_v = plain_k.clone(), plain_v.clone()
    key_pos = torch.arange(positions, device=DEVICE)
    for p in range(positions):
        # q, k, v as block_qkv makes them: transposed views of one [B, 1, 3, nh, D] tensor.
        qkv = torch.randn(batch, 1, 3, heads, dim, generator=generator).to(DEVICE, dtype)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        index = torch.tensor([p], device=DEVICE)
        want = attend_local(q, k, v, plain_k, plain_v, index, key_pos)
        got = fused_ops.local_attention(q, k, v, fused_k, fused_v, index)
        tol = 1e-6 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
        assert torch.equal(fused_k, plain_k) and torch.equal(fused_v, plain_v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_attention_equals_the_plain_attender(dtype, monkeypatch):
    """The global decode as the static step runs it: rows of different lengths, one row that does not
    advance (it writes to the scratch column), attention over a length bucket past every row's end."""
    from tts_core.engine.cuda.static_step import _book

    generator = torch.Generator().manual_seed(4)
    rows, heads, dim, max_len, length = 4, 2, 16, 300, 256  # 4 chunks of 64 keys, the last ones hidden
    lengths = torch.tensor([0, 5, 130, 255], device=DEVICE)
    stepped = torch.tensor([True, True, False, True], device=DEVICE)
    caches = []
    for _ in range(2):
        cache = KVCache(1, rows + 1, heads, max_len, dim, device=DEVICE, dtype=dtype)
        caches.append(cache)
    fill = torch.randn(rows + 1, heads, max_len, dim, generator=generator).to(DEVICE, dtype)
    for cache in caches:
        cache.k[0].copy_(fill)
        cache.v[0].copy_(fill.flip(2))
    _, write_pos, key_mask = _book(stepped, torch.ones_like(stepped), lengths, torch.arange(length, device=DEVICE),
                                   max_len - 1, dtype)
    qkv = torch.randn(rows, 1, 3, heads, dim, generator=generator).to(DEVICE, dtype)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    got = fused_ops.decode_attention(q, k, v, caches[0].k[0][:rows], caches[0].v[0][:rows], write_pos, key_mask, length)
    monkeypatch.setattr(fused_ops, "_disabled", "test: the plain path")  # the attender's plain path, on a GPU too
    want = StaticDecodeAttender(caches[1], write_pos, key_mask, length).attend(0, q, k, v)
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert torch.equal(caches[0].k[0], caches[1].k[0]) and torch.equal(caches[0].v[0], caches[1].v[0])


def test_cpu_steps_keep_the_plain_path(monkeypatch):
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        assert fused_ops.available()  # requirements-dev.txt installs Triton here: these tests must run
    assert not fused_ops.fused_enabled(torch.device("cpu"))
    monkeypatch.setattr(fused_ops, "_disabled", "test: the plain path")
    assert not fused_ops.fused_enabled(torch.device("cuda"))


# ---- start-up: the kernels are built before serving, and turned off where they cannot be -------------


def _static_runner(models, num_slots=2):
    from bench.lib.runners import static_runner

    return static_runner(models, num_slots, max_context_rows=300)


def test_warming_the_kernels_changes_no_stream_state(tiny_models, tiny_lm_vectors):
    """The warm-up steps run with every row masked: a stream's KV, hidden state, length and
    repetition history are untouched (checked here on the plain ops)."""
    from bench.lib.drive import drive

    runner = _static_runner(tiny_models)
    prompt = tiny_lm_vectors["A_voice_clone_en.input_ids"].numpy()
    runner.begin_stream(0, SamplingParams(), 7)
    runner.start_segment(0, prompt, None)
    runner.step([0])
    state = runner.graphs.state
    scratch = state.scratch_col
    before = [t.clone() for t in (state.hidden, state.lengths, state.seen)]
    before_kv = [t[:, :, :scratch].clone() for t in state.cache.k + state.cache.v]
    runner.graphs.warm_kernels()
    after_kv = [t[:, :, :scratch] for t in state.cache.k + state.cache.v]
    assert all(torch.equal(a, b) for a, b in zip(before, (state.hidden, state.lengths, state.seen)))
    assert all(torch.equal(a, b) for a, b in zip(before_kv, after_kv))
    runner.release(0)
    # And a stream run afterwards gets the codes of a runner that never warmed up.
    args = ([prompt], [3], [1], SamplingParams())
    assert all(np.array_equal(a, b) for a, b in zip(drive(runner, *args, frames=4)[0],
                                                     drive(_static_runner(tiny_models), *args, frames=4)[0]))


def test_kernels_that_fail_to_build_are_turned_off_at_start_up(tiny_models, tiny_lm_vectors, monkeypatch):
    """A GPU where the kernels cannot be built (simulated: they raise) starts on the plain ops and
    serves the same codes; the reason is kept for the logs."""
    from bench.lib.drive import drive

    prompt = tiny_lm_vectors["B_voice_clone_zh.input_ids"].numpy()
    args = ([prompt], [5], [0], SamplingParams())
    want, _ = drive(_static_runner(tiny_models), *args, frames=4)

    def broken(*_args):
        raise RuntimeError("simulated build failure")

    monkeypatch.setattr(fused_ops, "_disabled", None)
    # The kernels as if on a GPU: the CPU runner takes the fused path, where every kernel raises
    # (whichever the step reaches first; on a GPU host, CPU tensors could not run them anyway).
    monkeypatch.setattr(fused_ops, "fused_enabled", lambda device: fused_ops._disabled is None)
    monkeypatch.setattr(fused_ops, "check_device", lambda device: fused_ops.fused_enabled(device))
    for name in ("pick_code", "local_attention", "decode_attention"):
        monkeypatch.setattr(fused_ops, name, broken)
    monkeypatch.setattr(ring_kernel, "ring_attention", broken)
    runner = _static_runner(tiny_models)
    assert "simulated build failure" in fused_ops.disabled_reason()
    got, _ = drive(runner, *args, frames=4)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_a_ring_kernel_that_fails_at_start_up_turns_the_kernels_off(tiny_models, monkeypatch):
    """The warm-up runs a codec pass of each size too: a codec ring kernel that cannot be built is
    found there, before any listener's chunk, and the plain attention serves instead."""
    from tts_core.engine.cuda import graphs

    def broken(*_args):
        raise RuntimeError("simulated ring kernel failure")

    monkeypatch.setattr(fused_ops, "_disabled", None)
    monkeypatch.setattr(fused_ops, "fused_enabled", lambda device: fused_ops._disabled is None)
    monkeypatch.setattr(fused_ops, "check_device", lambda device: fused_ops.fused_enabled(device))
    monkeypatch.setattr(ring_kernel, "ring_attention", broken)
    # The tiny runner's buckets are below the kernel's rows: ask for it at every size. (The LM part of
    # the warm-up is skipped: the test above covers it, and interpreted it would take minutes.)
    monkeypatch.setattr(graphs, "codec_attention", lambda rows, frames, kernel: "ring_kernel" if kernel else "gemm")
    monkeypatch.setattr(graphs, "step_static", lambda *_args: None)
    runner = _static_runner(tiny_models)
    assert "simulated ring kernel failure" in fused_ops.disabled_reason()
    runner.begin_stream(0, SamplingParams(), 0)
    pcm = runner.decode([0], np.zeros((1, 2, 16), np.int64))  # served by the plain attention
    assert len(pcm) == 1 and pcm[0].shape == (2, 2 * 3840)


def test_plain_ops_turns_the_kernels_off_on_this_thread_only():
    """`torch.export` runs inside `plain_ops()` (a raw Triton launch cannot be traced): the kernels are
    off on the exporting thread while inside it, and stay on elsewhere."""
    cuda = torch.device("cuda")
    assert fused_ops.fused_enabled(cuda)  # Triton is installed here (its interpreter runs the kernels)
    seen = []
    with fused_ops.plain_ops():
        assert not fused_ops.fused_enabled(cuda)
        with fused_ops.plain_ops():
            assert not fused_ops.fused_enabled(cuda)
        assert not fused_ops.fused_enabled(cuda)  # an inner exit keeps the outer one in force
        other = threading.Thread(target=lambda: seen.append(fused_ops.fused_enabled(cuda)))
        other.start()
        other.join()
    assert seen == [True] and fused_ops.fused_enabled(cuda)


def test_a_hold_gives_the_plain_ops_on_its_device_except_to_the_building_thread():
    """A deferred start serves on the plain ops while another thread builds the kernels: the hold is
    per device, the building thread sees the kernels, and what /health lists does not change."""
    import threading

    held, other = torch.device("cuda", 0), torch.device("cuda", 1)
    assert fused_ops.fused_enabled(held) and fused_ops.fused_enabled(other)
    fused_ops.hold(held)
    try:
        assert not fused_ops.fused_enabled(held) and fused_ops.fused_enabled(other)
        assert fused_ops.planned(held)
        with fused_ops.building():
            assert fused_ops.fused_enabled(held)
            seen = []
            thread = threading.Thread(target=lambda: seen.append(fused_ops.fused_enabled(held)))
            thread.start()
            thread.join()
            assert seen == [False]  # only the building thread itself
        assert not fused_ops.fused_enabled(held)
    finally:
        fused_ops.release(held)
    assert fused_ops.fused_enabled(held)
