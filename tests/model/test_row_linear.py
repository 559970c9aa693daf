"""Row-independent CPU products (`model/row_linear.py`) and the batched exact paths built on them:
the same math as the plain modules (to float tolerance), and each row's bits independent of the
rows beside it. The CPU runner's end-to-end exactness is tested in tests/engine/test_cpu_determinism.py."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tts_core.config import SamplingParams
from tts_core.engine.sampler import StreamSampler, batch_for_frame
from tts_core.model import lm_step
from tts_core.model.codec_rows import RowDecoder
from tts_core.model.row_linear import (
    ONEDNN_MIN_WEIGHTS,
    EachRowLinear,
    RowLinear,
    make_rows_independent,
    onednn_available,
    rows_independent,
)
from tts_core.model.sampling import MIN_WINDOW, FilterParams

# (in, out): below and above the size from which the weight goes through oneDNN
SMALL, LARGE = (64, 192), (768, 2304)
assert SMALL[0] * SMALL[1] < ONEDNN_MIN_WEIGHTS <= LARGE[0] * LARGE[1]


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _linear(shape, bias=True) -> nn.Linear:
    torch.manual_seed(sum(shape))
    return nn.Linear(*shape, bias=bias)


@pytest.mark.parametrize("shape", [SMALL, LARGE], ids=["small", "large"])
@pytest.mark.parametrize("bias", [True, False])
def test_a_row_linear_computes_the_linear(shape, bias):
    plain = _linear(shape, bias)
    rows = RowLinear.of(plain)
    assert (rows.packed is not None) == (shape == LARGE and onednn_available())
    for x in (torch.randn(1, shape[0]), torch.randn(5, shape[0]), torch.randn(2, 3, shape[0])):
        got = rows(x)
        assert got.shape == (*x.shape[:-1], shape[1])
        torch.testing.assert_close(got, plain(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rows.weight, plain.weight.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("shape", [SMALL, LARGE], ids=["small", "large"])
def test_a_row_is_the_same_beside_any_rows_at_any_position(shape, count, threads):
    threads(count)
    rows = RowLinear.of(_linear(shape))
    row = torch.randn(1, shape[0])
    want = rows(row)[0]
    apart = []
    for total in (2, 3, 4, 5, 6, 9, 17):
        for position in range(total):
            batch = torch.randn(total, shape[0])
            batch[position] = row[0]
            if not torch.equal(rows(batch)[position], want):
                apart.append((total, position))
    # Where this machine's kernels keep rows apart (this project's machines do), none differs; where
    # they would not, the start-up probe must say so (the runner then steps each stream alone).
    assert rows_independent(nn.Sequential(rows)) == (not apart), apart


def _int8(shape) -> nn.Module:
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(nn.Sequential(_linear(shape)), {"0": default_dynamic_qconfig}, dtype=torch.qint8)


def test_int8_rows_share_one_scale_unless_run_one_by_one():
    module = _int8(SMALL)
    assert not rows_independent(module)  # one activation scale over all the rows of a call
    assert make_rows_independent(module) == 1 and isinstance(module[0], EachRowLinear)
    assert rows_independent(module)
    row, loud = torch.randn(1, SMALL[0]), 100 * torch.randn(1, SMALL[0])
    assert torch.equal(module(torch.cat([loud, row]))[1], module(row)[0])


def test_make_rows_independent_swaps_fp32_linears_once_and_copies():
    module = nn.Sequential(_linear(SMALL), nn.GELU(), _linear((SMALL[1], 1024)))
    x = torch.randn(3, SMALL[0])
    want = module(x)
    assert make_rows_independent(module) == 2 and make_rows_independent(module) == 0
    assert all(isinstance(module[i], RowLinear) for i in (0, 2))
    torch.testing.assert_close(module(x), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(copy.deepcopy(module)(x), module(x))


def test_the_cpu_top_k_window_is_never_narrower_than_a_vector():
    """Rows of a step share one top-k window; a CPU softmax narrower than its vector width sums in
    another order, so the window's floor keeps a narrow top-k's draw the same beside a wide one."""
    assert FilterParams.build([1.0], [5], [1.0], vocab=1024).window == MIN_WINDOW
    assert FilterParams.build([1.0, 1.0], [5, 60], [1.0, 1.0], vocab=1024).window == 60
    assert FilterParams.build([1.0], [0], [1.0], vocab=1024).window == 0  # top-k off: the whole row


# ---- the batched paths on the tiny checkpoints -------------------------------------------------------


@pytest.fixture(scope="module")
def models(tiny_models):
    """Copies of the tiny models with their step's and decoder's linears swapped."""
    lm, codec = copy.deepcopy(tiny_models[0]), copy.deepcopy(tiny_models[1])
    make_rows_independent(lm, lm_step.ROW_LINEARS)
    return lm, codec


def test_the_row_decoder_is_the_codec_decode(tiny_models, models):
    """Same audio as `decode_step` up to float rounding, for calls of 1 to 5 frames."""
    codec, decoder = tiny_models[1], RowDecoder(models[1])
    codes = torch.as_tensor(np.random.default_rng(1).integers(0, 1024, (2, 15, 16)))
    plain, rows = codec.new_decode_state(2), models[1].new_decode_state(3)
    start = 0
    for n in (1, 4, 5, 2, 3):
        want = codec.decode_step(codes[:, start : start + n].transpose(1, 2), plain)
        got = decoder.decode(codes[:, start : start + n], rows, [2, 0])
        torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-5)
        start += n
    assert rows.frames_decoded.tolist() == [15, 0, 15]


def test_the_rows_step_is_the_step(tiny_models, models, tiny_lm_vectors):
    """`lm_step.ROWS` and `lm.decode_rows` against the plain units and `lm.decode`: greedy codes
    equal, hidden states to float tolerance."""
    prompt = tiny_lm_vectors["A_voice_clone_en.input_ids"]
    states = []
    for lm, units, decode in ((tiny_models[0], lm_step.EAGER, "decode"), (models[0], lm_step.ROWS, "decode_rows")):
        cache = lm.new_cache(2, 400)
        hidden = torch.stack([lm.prefill(prompt, cache, 0), lm.prefill(prompt[:-3], cache, 1)])
        sampler = [StreamSampler(SamplingParams.greedy(), 0), StreamSampler(SamplingParams.greedy(), 1)]
        frames = []
        for _ in range(6):
            _, codes = lm.generate_frame(hidden, batch_for_frame(sampler), local=lm.new_local_cache(2), units=units)
            hidden = getattr(lm, decode)(codes, cache, [0, 1])
            frames.append((codes, hidden))
        states.append(frames)
    for (want_codes, want_hidden), (codes, hidden) in zip(*states):
        assert torch.equal(codes, want_codes)
        torch.testing.assert_close(hidden, want_hidden, rtol=1e-4, atol=1e-4)
