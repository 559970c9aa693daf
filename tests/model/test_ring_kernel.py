"""The codec's Triton ring attention (`model/ring_kernel.py`) against the masked attention it replaces.

Without a GPU they run in Triton's interpreter on CPU tensors (conftest sets TRITON_INTERPRET=1),
where the TF32 splitting does not apply: there they check the indexing, the visibility rule and the
slot skipping. On a GPU they run compiled, and tests/gpu/test_gpu_engine.py checks the full-size codec.
"""

from __future__ import annotations

import platform

import pytest
import torch

from tts_core.model import ring_kernel
from tts_core.model.codec_layers import ProjectedTransformer, StageCache, ring_attention

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# Triton has wheels for Linux x86_64 only; elsewhere these tests cannot run (and CI is Linux x86_64).
pytestmark = pytest.mark.skipif(ring_kernel.triton is None and not (platform.system() == "Linux"
                                and platform.machine() == "x86_64"), reason="Triton has no wheel here")


def _ring(offsets: list[int], capacity: int, window: int, new: int) -> StageCache:
    """Ring positions after each row wrote positions [0, offset + new) in order (slot = p mod capacity)."""
    positions = torch.full((len(offsets), capacity), -1, dtype=torch.long)
    for row, offset in enumerate(offsets):
        for p in range(offset + new):
            positions[row, p % capacity] = p
    return StageCache(keys=[], values=[], positions=positions.to(DEVICE), offsets=torch.tensor(offsets, device=DEVICE),
                      window=window)


@pytest.mark.parametrize(("new", "window"), [(4, 24), (8, 24), (40, 24), (8, 150)])
def test_ring_kernel_equals_masked_attention(new, window):
    """Query blocks of 16 (padded), 16 and 64; rings of one block and of three (150 + 7 slots: the
    fresh and part-filled rows skip the blocks past their last position)."""
    capacity = window + new - 1
    # Rows: fresh, part-filled, just wrapped, long wrapped.
    ring = _ring([0, 9, capacity - new + 3, 5 * capacity + 7], capacity, window, new)
    queries = ring.offsets[:, None] + torch.arange(new, device=DEVICE)
    g = torch.Generator().manual_seed(new + window)
    q = torch.randn(4, 2, new, 16, generator=g).to(DEVICE)
    keys, values = torch.randn(2, 4, 2, capacity, 16, generator=g).to(DEVICE)
    want = ring_attention(q, keys, values, ProjectedTransformer._ring_mask(ring, queries, trim=False))
    got = ring_kernel.ring_attention(q, keys, values, ring.positions, queries, window)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_ring_kernel_reads_strided_queries_and_gives_zeros_where_nothing_is_visible():
    window, new, capacity = 10, 4, 13
    ring = _ring([3, 0], capacity, window, new)
    ring.positions[1] = -1  # an emptied row (e.g. a slot reset between streams)
    queries = ring.offsets[:, None] + torch.arange(new, device=DEVICE)
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, new, 3, 2, 16, generator=g).to(DEVICE).permute(2, 0, 3, 1, 4)  # views, as the layer makes
    keys, values = torch.randn(2, 2, 2, capacity, 16, generator=g).to(DEVICE)
    got = ring_kernel.ring_attention(qkv[0], keys, values, ring.positions, queries, window)
    mask = ProjectedTransformer._ring_mask(ring, queries, trim=False)
    torch.testing.assert_close(got[0], ring_attention(qkv[0], keys, values, mask)[0], rtol=1e-5, atol=1e-5)
    assert not got[1].any()


def test_ring_kernel_fits_fp32_rings_only():
    keys = torch.zeros(1, 2, 8, 16)
    assert ring_kernel.ring_attention_fits(keys, keys)
    assert not ring_kernel.ring_attention_fits(keys.half(), keys.half())
    assert not ring_kernel.ring_attention_fits(torch.zeros(1, 2, 8, 12), torch.zeros(1, 2, 8, 12))


def test_codec_decode_with_ring_kernel_matches_sdpa(tiny_models):
    """The tiny codec's streaming passes, some rows idle, for long enough that every ring wraps."""
    codec = tiny_models[1].to(DEVICE)
    states = [codec.new_decode_state(3, DEVICE), codec.new_decode_state(3, DEVICE)]
    g = torch.Generator().manual_seed(2)
    for step in range(12):
        active = torch.tensor([True, step % 3 != 0, step < 4], device=DEVICE)
        codes = torch.randint(0, 1024, (3, 16, 1 + step % 4), generator=g).to(DEVICE)
        want = codec.decode_frames_static(codes, states[0], active)
        got = codec.decode_frames_static(codes, states[1], active, attention="ring_kernel")
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for a, b in zip(states[0].stages, states[1].stages):
        assert torch.equal(a.positions, b.positions) and torch.equal(a.offsets, b.offsets)
        for x, y in zip((*a.keys, *a.values), (*b.keys, *b.values)):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
    assert int(states[1].stages[-1].offsets[0]) > states[1].stages[-1].capacity  # the last ring wrapped
