"""The codec's streaming ring attention as one Triton kernel (fp32 codec, CUDA; docs/PERFORMANCE.md).

Visibility comes from the ring's positions (no mask tensor), slots that cannot hold a visible key
are never read, and both products run on tensor cores as "tf32x3" (each operand split into high and
low TF32 parts, the low x low term dropped: about 2^-22 relative error per product). Same math as
`codec_layers.ring_attention` under the stage's mask; the rounding differs by about fp32's
(another summation order, an online softmax; tests/model/test_ring_kernel.py).
"""

from __future__ import annotations

import math

import torch

from .fused_ops import tl, triton

BLOCK_N = 64  # ring slots per inner step
PRECISION = "tf32x3"


def _kernel():
    @triton.jit
    def ring_attention_kernel(
        q_ptr, k_ptr, v_ptr, kpos_ptr, qpos_ptr, out_ptr,
        sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, skp_b, sqp_b, so_b, so_h, so_n,
        n_queries, window, scale,
        N_SLOTS: tl.constexpr, NH: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        bh = tl.program_id(0)
        b, h = bh // NH, bh % NH
        rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_queries
        dims = tl.arange(0, D)
        q = tl.load(q_ptr + b * sq_b + h * sq_h + rows[:, None] * sq_n + dims[None, :],
                    mask=row_ok[:, None], other=0.0)
        qpos = tl.load(qpos_ptr + b * sqp_b + rows, mask=row_ok, other=-1)
        # Until the ring wraps, slot s holds position s, so slots past the last query are empty.
        # (The window's start needs no such bound: the ring holds window + n - 1 slots, so it
        # wraps before any query's window leaves slot 0 behind.)
        end = tl.minimum(tl.max(qpos, 0) + 1, N_SLOTS)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        # A fixed loop with the skipped blocks branched over (data-dependent loop bounds would do
        # on a GPU, but Triton's interpreter, which the CPU tests run, needs constant ones).
        for block in range(0, N_SLOTS, BLOCK_N):
            if block < end:
                cols = block + tl.arange(0, BLOCK_N)
                col_ok = cols < end
                kpos = tl.load(kpos_ptr + b * skp_b + cols, mask=col_ok, other=-1)
                k = tl.load(k_ptr + b * sk_b + h * sk_h + cols[:, None] * sk_n + dims[None, :],
                            mask=col_ok[:, None], other=0.0)
                scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
                delta = qpos[:, None] - kpos[None, :]
                visible = (kpos[None, :] >= 0) & (delta >= 0) & (delta < window)
                scores = tl.where(visible, scores, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(scores, 1))
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing visible yet: no NaN
                alpha = tl.exp(m_i - m_safe)
                p = tl.exp(scores - m_safe[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                v = tl.load(v_ptr + b * sv_b + h * sv_h + cols[:, None] * sv_n + dims[None, :],
                            mask=col_ok[:, None], other=0.0)
                acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
                m_i = m_new
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # a query that sees nothing gets zeros
        tl.store(out_ptr + b * so_b + h * so_h + rows[:, None] * so_n + dims[None, :], out,
                 mask=row_ok[:, None])

    return ring_attention_kernel


_ring_attention_kernel = _kernel() if triton is not None else None


def ring_attention_fits(keys: torch.Tensor, values: torch.Tensor) -> bool:
    """What the kernel handles: fp32 rings (an fp32 codec), a power-of-two head size of 16 or more,
    key and value rows with stride 1."""
    dim = keys.shape[-1]
    return (_ring_attention_kernel is not None and keys.dtype == values.dtype == torch.float32
            and dim >= 16 and dim & (dim - 1) == 0 and keys.stride(-1) == 1 and values.stride(-1) == 1)


def ring_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, key_positions: torch.Tensor,
                   query_positions: torch.Tensor, window: int) -> torch.Tensor:
    """Attention of queries q [B, H, n, D] at positions `query_positions` [B, n] over ring slots
    keys/values [B, H, K, D] holding positions `key_positions` [B, K] (-1: empty). A query sees the
    keys at positions p with 0 <= (its position - p) < window. Returns [B, H, n, D] fp32."""
    batch, heads, queries, dim = q.shape
    q = q.float()
    if q.stride(-1) != 1:
        q = q.contiguous()
    key_positions = key_positions if key_positions.stride(-1) == 1 else key_positions.contiguous()
    query_positions = query_positions if query_positions.stride(-1) == 1 else query_positions.contiguous()
    out = torch.empty(batch, heads, queries, dim, dtype=torch.float32, device=q.device)
    block_m = max(16, min(64, triton.next_power_of_2(queries)))
    grid = (batch * heads, triton.cdiv(queries, block_m))
    _ring_attention_kernel[grid](
        q, keys, values, key_positions, query_positions, out,
        q.stride(0), q.stride(1), q.stride(2), keys.stride(0), keys.stride(1), keys.stride(2),
        values.stride(0), values.stride(1), values.stride(2), key_positions.stride(0), query_positions.stride(0),
        out.stride(0), out.stride(1), out.stride(2), queries, window, 1.0 / math.sqrt(dim),
        N_SLOTS=keys.shape[2], NH=heads, D=dim, BLOCK_M=block_m, BLOCK_N=BLOCK_N, PRECISION=PRECISION, num_warps=4,
    )
    return out
