"""Streaming decode: equals offline for any chunking, batched rows are independent, reset isolates rows.

The tiny codec's windows are 15/20/30/40 tokens (3.75/2.5/1.9/1.25 frames), so a dozen frames already
wraps every ring several times.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_helpers import ATOL, max_diff

from tts_core.model.codec import MossAudioCodec

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def zh1_codes(data_dir: Path) -> torch.Tensor:
    return torch.from_numpy(np.load(data_dir / "codec" / "zh_1.prompt_codes.npy")).t()[None]  # [1, 16, 99]


def _stream(codec: MossAudioCodec, codes: torch.Tensor, chunks: list[int], **state_kwargs) -> torch.Tensor:
    state = codec.new_decode_state(codes.shape[0], **state_kwargs)
    out, start = [], 0
    for size in chunks:
        piece = codec.decode_step(codes[:, :, start : start + size], state)
        assert piece.shape == (codes.shape[0], 2, 3840 * size)
        out.append(piece)
        start += size
    assert start == codes.shape[-1]
    return torch.cat(out, dim=-1)


@pytest.mark.parametrize("frames_per_call", [1, 3])
def test_stream_matches_reference_sessions(tiny_codec, codec_vectors, frames_per_call: int) -> None:
    codes = codec_vectors["decode.input_codes"][None]  # [1, 16, 12]
    streamed = _stream(tiny_codec, codes, [frames_per_call] * (12 // frames_per_call))[0]
    reference = codec_vectors[f"decode_stream_session_{frames_per_call}frame.audio"]
    assert max_diff(streamed, reference) < ATOL
    assert max_diff(streamed, codec_vectors["decode_offline.audio"]) < ATOL
    assert max_diff(streamed, tiny_codec.decode(codes)[0]) < ATOL


def test_long_stream_wraps_rings_and_keeps_memory_fixed(tiny_codec, zh1_codes) -> None:
    codes = zh1_codes[:, :, :40]
    state = tiny_codec.new_decode_state(1)
    shapes = [tuple(k.shape) for stage in state.stages for k in stage.keys]
    streamed = torch.cat([tiny_codec.decode_step(codes[:, :, i : i + 1], state) for i in range(40)], dim=-1)
    assert max_diff(streamed, tiny_codec.decode(codes)) < ATOL
    assert [tuple(k.shape) for stage in state.stages for k in stage.keys] == shapes
    assert state.frames_decoded.tolist() == [40]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), per_pass=st.sampled_from([1, 2, 4]))
def test_any_chunking_equals_offline(tiny_codec, codec_vectors, data, per_pass: int) -> None:
    codes = codec_vectors["decode.input_codes"][None]
    chunks, left = [], 12
    while left:
        size = data.draw(st.integers(1, left), label="chunk")
        chunks.append(size)
        left -= size
    streamed = _stream(tiny_codec, codes, chunks, max_frames_per_pass=per_pass)
    assert max_diff(streamed[0], codec_vectors["decode_offline.audio"]) < ATOL


def test_batched_rows_at_different_offsets_equal_single_rows(tiny_codec, codec_vectors, zh1_codes) -> None:
    a = codec_vectors["decode.input_codes"][None]  # row 0
    b = zh1_codes[:, :, :12]  # row 1, started 5 frames later
    alone_a = _stream(tiny_codec, a, [1] * 12)
    alone_b = _stream(tiny_codec, b, [1] * 12)
    state = tiny_codec.new_decode_state(2)
    both = torch.cat([a, b])
    idle = torch.tensor([True, False])
    head = tiny_codec.decode_step(both[:, :, :5], state, active=idle)  # only row 0 advances
    assert state.frames_decoded.tolist() == [5, 0]
    assert torch.all(head[1] == 0)
    outs_a, outs_b = [head[0]], []
    for step in range(7):  # row 0 at frames 5..11 while row 1 runs frames 0..6: different offsets
        codes = torch.stack([a[0, :, 5 + step : 6 + step], b[0, :, step : step + 1]])
        piece = tiny_codec.decode_step(codes, state)
        outs_a.append(piece[0])
        outs_b.append(piece[1])
    assert max_diff(torch.cat(outs_a, -1), alone_a[0]) < ATOL
    idle_codes = torch.full_like(b[0, :, 7:12], 1024)  # an idle row may carry the pad id
    tail = tiny_codec.decode_step(
        torch.stack([idle_codes, b[0, :, 7:12]]), state, active=torch.tensor([False, True])
    )
    outs_b.append(tail[1])
    assert max_diff(torch.cat(outs_b, -1), alone_b[0]) < ATOL
    assert state.frames_decoded.tolist() == [12, 12]


def test_reset_rows_is_isolated(tiny_codec, codec_vectors, zh1_codes) -> None:
    a = codec_vectors["decode.input_codes"][None]
    b = zh1_codes[:, :, 20:32]
    state = tiny_codec.new_decode_state(2)
    both = torch.cat([a, b])
    first = tiny_codec.decode_step(both[:, :, :6], state)
    state.reset([0])  # forget row 0 only
    assert state.frames_decoded.tolist() == [0, 6]
    second = tiny_codec.decode_step(torch.stack([a[0, :, :6], b[0, :, 6:12]]), state)
    # row 1 continues as if nothing happened; row 0 restarts from an empty state
    assert max_diff(torch.cat([first[1], second[1]], -1), tiny_codec.decode(b)[0]) < ATOL
    assert max_diff(second[0], tiny_codec.decode(a[:, :, :6])[0]) < ATOL
    idle = tiny_codec.decode_step(both[:, :, :2], state, active=torch.tensor([False, False]))
    assert idle.shape == (2, 2, 7680) and not idle.any() and state.frames_decoded.tolist() == [6, 12]
    state.reset(torch.tensor([False, True]))
    assert state.frames_decoded.tolist() == [6, 0]
    state.reset()
    assert state.frames_decoded.tolist() == [0, 0]
    assert all(bool((stage.positions == -1).all()) for stage in state.stages)


def test_decode_step_validates_input(tiny_codec) -> None:
    state = tiny_codec.new_decode_state(2)
    with pytest.raises(ValueError, match="for this decode state"):
        tiny_codec.decode_step(torch.zeros(1, 16, 1, dtype=torch.long), state)
    with pytest.raises(ValueError, match=r"\[0, 1024\)"):
        tiny_codec.decode_step(torch.full((2, 16, 1), 1024), state)
    with pytest.raises(ValueError, match="codes must be"):
        tiny_codec.decode_step(torch.zeros(2, 17, 1, dtype=torch.long), state)
    with pytest.raises(ValueError, match="active"):
        tiny_codec.decode_step(torch.zeros(2, 16, 1, dtype=torch.long), state, active=torch.tensor([True]))
    assert state.frames_decoded.tolist() == [0, 0]


def test_narrow_view_decodes_in_place(tiny_codec, codec_vectors, zh1_codes) -> None:
    a = codec_vectors["decode.input_codes"][None]
    state = tiny_codec.new_decode_state(3)
    view = state.narrow(1, 2)  # only row 1
    out = torch.cat([tiny_codec.decode_step(a[:, :, i : i + 3], view) for i in range(0, 12, 3)], dim=-1)
    assert max_diff(out, tiny_codec.decode(a)) < ATOL
    assert state.frames_decoded.tolist() == [0, 12, 0]
    with pytest.raises(ValueError, match="outside"):
        state.narrow(2, 4)
