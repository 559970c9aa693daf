"""Per-stream sampling state, and the per-frame `SamplingBatch` the model's kernels read.

Each stream owns a `StreamSampler` (its parameters, its own seeded generator and its per-codebook
"seen" mask); `batch_for_frame` stacks B of them for one frame step. A stream draws exactly
1 + n_vq uniforms per frame from its own generator, so its output never depends on which other
streams share the batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import torch

from ..config import SamplingParams
from ..model.sampling import FilterParams, SamplingBatch, kth_index, top_p_bound

# A stream's uniforms are drawn this many frames at a time (one generator call, not one per frame);
# the CPU generator fills element by element, so the draws equal per-frame calls' (test_sampling.py).
DRAW_BLOCK_FRAMES = 16


class StreamSampler:
    """Sampling state of one stream: the request's `SamplingParams`, its own CPU `torch.Generator`
    seeded with `seed`, and the seen mask [n_vq, codebook_size] (the largest codebook's width)."""

    def __init__(self, params: SamplingParams, seed: int, n_vq: int = 16, codebook_size: int = 1024):
        self.params = params
        self.seed = int(seed)
        self.n_vq = n_vq
        self.generator = torch.Generator(device="cpu")
        self.seen = torch.zeros(n_vq, codebook_size, dtype=torch.bool)  # [K, V]
        self.num_frames = 0
        self._returned: deque[np.ndarray] = deque()  # draws of dropped steps, handed out again first
        self._block = np.empty((0, 1 + n_vq), np.float32)  # drawn ahead; rows [_next:] not handed out yet
        self._next = 0
        self.reset()

    def reset(self) -> None:
        """Back to the state right after construction (same seed, nothing seen)."""
        self.generator.manual_seed(self.seed)
        self.seen.zero_()
        self.num_frames = 0
        self._returned.clear()
        self._block = self._block[:0]
        self._next = 0

    def draw_uniforms(self) -> np.ndarray:
        """The frame's 1 + n_vq uniforms in [0, 1): text decision first, then codebooks 0..n_vq-1
        (float32 [1 + n_vq], read-only: a row of the block drawn ahead)."""
        if self._returned:
            return self._returned.popleft()
        if self._next == len(self._block):
            self._block = torch.rand(DRAW_BLOCK_FRAMES, 1 + self.n_vq, generator=self.generator,
                                     dtype=torch.float32).numpy()
            self._block.flags.writeable = False
            self._next = 0
        self._next += 1
        return self._block[self._next - 1]

    def put_back(self, uniforms: np.ndarray | torch.Tensor) -> None:
        """Return the draw of a step whose frame was dropped: the next draws give it again (in the
        order returned), so the stream's frames use the same uniforms as if that step never ran."""
        self._returned.append(np.array(uniforms, dtype=np.float32))

    def observe(self, codes: torch.Tensor | np.ndarray | Sequence[int]) -> None:
        """Record an emitted frame [n_vq] in the seen mask (repetition-penalty history)."""
        if isinstance(codes, torch.Tensor):
            codes_t = codes.detach().to(device="cpu", dtype=torch.long)
        else:
            codes_t = torch.as_tensor(np.asarray(codes), dtype=torch.long)
        self.seen[torch.arange(self.n_vq), codes_t.reshape(self.n_vq)] = True
        self.num_frames += 1


def batch_for_frame(samplers: Sequence[StreamSampler], device: torch.device | str | None = None) -> SamplingBatch:
    """Stack B streams for one frame; draws 1 + n_vq uniforms from each stream's generator."""
    if not samplers:
        raise ValueError("batch_for_frame needs at least one stream")
    params = [s.params for s in samplers]
    device = torch.device(device) if device is not None else torch.device("cpu")
    uniforms = torch.from_numpy(np.stack([s.draw_uniforms() for s in samplers]))  # [B, 1 + K]
    seen = torch.stack([s.seen for s in samplers])  # [B, K, V]
    return SamplingBatch(
        do_sample=torch.tensor([p.do_sample for p in params], dtype=torch.bool, device=device),
        audio=FilterParams.build(
            [p.audio_temperature for p in params],
            [p.audio_top_k for p in params],
            [p.audio_top_p for p in params],
            vocab=seen.shape[-1],
            device=device,
        ),
        audio_repetition_penalty=torch.tensor(
            [p.audio_repetition_penalty for p in params], dtype=torch.float32, device=device
        ),
        text=FilterParams.build(
            [p.text_temperature for p in params],
            [p.text_top_k for p in params],
            [p.text_top_p for p in params],
            vocab=2,
            device=device,
        ),
        uniforms=uniforms.to(device),
        seen=seen.to(device),
        any_sample=any(p.do_sample for p in params),
        all_sample=all(p.do_sample for p in params),
        any_penalty=any(p.audio_repetition_penalty != 1.0 for p in params),
    )


def param_row(params: SamplingParams, vocab: int) -> list[float]:
    """One stream's sampling parameters as floats, the layout of `packed_batch`'s table
    (ids up to 2^24 are exact in float32)."""
    # Plain floats (no tensors: this runs for every admitted stream); the float32 table rounds them
    # exactly as `FilterParams.build` does.
    return [float(params.do_sample), float(params.audio_temperature), float(kth_index(params.audio_top_k, vocab)),
            top_p_bound(params.audio_top_p), float(params.audio_repetition_penalty),
            float(params.text_temperature), float(kth_index(params.text_top_k, 2)), top_p_bound(params.text_top_p)]


def packed_batch(table: torch.Tensor, uniforms: torch.Tensor, seen: torch.Tensor, vocab: int) -> SamplingBatch:
    """A `SamplingBatch` read from device tables (no host values: CUDA-graph friendly): table [B, 8]
    rows of `param_row`, uniforms [B, 1 + K], seen [B, K, V]. Both branches (greedy and sampled) and
    the penalty always run, so the kernels never depend on the rows' parameters."""
    return SamplingBatch(
        do_sample=table[:, 0] > 0.5,
        audio=FilterParams(table[:, 1:2], table[:, 2:3].long(), table[:, 3:4], window=0, vocab=vocab),
        audio_repetition_penalty=table[:, 4],
        text=FilterParams(table[:, 5:6], table[:, 6:7].long(), table[:, 7:8], window=0, vocab=2),
        uniforms=uniforms,
        seen=seen,
        any_sample=True,
        all_sample=False,
        any_penalty=True,
    )
