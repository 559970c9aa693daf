"""How a streaming codec decode is cut into passes (one CUDA-graph replay each) and how each pass
runs its ring attention. Pure functions: the CUDA graphs (`graphs.py`) calls them."""

from __future__ import annotations

CODEC_PASS_FRAMES = (1, 2, 4)  # codec graphs per bucket: frames decoded by one pass (one replay)
# Measured per batch and pass length by `python -m bench.engine.codec_attention` (docs/PERFORMANCE.md):
# the Triton ring kernel from 16 rows on, the GEMMs below; without the kernel (no Triton, or a
# reduced-precision codec), 1-frame passes and buckets up to 16 rows take the GEMMs, larger SDPA.
RING_KERNEL_ROWS = 16
GEMM_CODEC_ATTENTION_ROWS = 16


def codec_attention(rows: int, frames: int, kernel: bool) -> str:
    """How a codec pass of `frames` frames over `rows` rows runs its ring attention (one of
    `codec_layers.ATTENTION_MODES`); `kernel`: the Triton ring kernel can serve (fp32 codec, CUDA)."""
    if kernel and rows >= RING_KERNEL_ROWS:
        return "ring_kernel"
    if frames == 1 or rows <= GEMM_CODEC_ATTENTION_ROWS:
        return "gemm"
    return "sdpa"


def split_passes(num_frames: int, sizes: list[int]) -> list[int]:
    """Frames per codec pass for `num_frames` frames, largest passes first (e.g. 7 -> [4, 2, 1])."""
    passes = []
    for size in sorted(sizes, reverse=True):
        while num_frames >= size:
            passes.append(size)
            num_frames -= size
    assert num_frames == 0, f"pass sizes {sizes} must include 1"
    return passes
