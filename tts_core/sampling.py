"""Token selection for the local transformer (LM.md §5.2), vectorised over a batch of streams.

Pure functions take their randomness as uniforms supplied by the caller, so nothing here touches
a global RNG. Each stream owns a `StreamSampler` (its parameters, its own seeded generator and its
per-codebook "seen" mask); `SamplingBatch.for_frame` stacks B of them for one frame step. A stream
draws exactly 1 + n_vq uniforms per frame from its own generator, so its output never depends on
which other streams share the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .config import SamplingParams

# --------------------------------------------------------------------------------------------------
# Pure math


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Penalise ids already generated: s < 0 -> s * rp, else s / rp (only where `seen`).

    Args:
        logits: [B, V] scores.
        seen: [B, V] bool, ids emitted earlier in this generation (same codebook).
        penalty: [B] repetition penalty per row (1.0 leaves the row unchanged bit for bit).
    """
    rp = penalty.to(logits.dtype)[:, None]  # [B, 1]
    penalised = torch.where(logits < 0, logits * rp, logits / rp)
    return torch.where(seen, penalised, logits)


def greedy_pick(logits: torch.Tensor) -> torch.Tensor:
    """Argmax over the last dim; ties resolve to the first index (torch.argmax guarantees it)."""
    return logits.argmax(dim=-1)


def _candidates(
    scores: torch.Tensor, top_k: torch.Tensor, max_top_k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Descending (values, ids) [B, W] holding every entry that top-k can keep.

    With all rows limited to k <= max_top_k < V, a top-(max_top_k + 1) window suffices unless a tie
    at some row's threshold runs past it; then (and when any row disables top-k) sort everything.
    """
    vocab = scores.shape[-1]
    # The tie check needs a host sync: take the window on the CPU only (a GPU sorts 1024 entries
    # in one kernel, and stays sync-free for graph capture).
    if 0 < max_top_k < vocab and scores.device.type == "cpu":
        values, ids = torch.topk(scores, max_top_k + 1, dim=-1)  # sorted descending
        k = top_k.clamp(min=1, max=max_top_k)
        threshold = values.gather(-1, (k - 1)[:, None])  # [B, 1]
        if not bool((values[:, -1:] >= threshold).any()):
            return values[:, :-1], ids[:, :-1]
    return torch.sort(scores, dim=-1, descending=True)


def sample_filtered(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    uniforms: torch.Tensor,
    max_top_k: int,
) -> torch.Tensor:
    """Temperature, top-k, top-p (the reference order), then one inverse-CDF draw per row.

    top-k keeps every score >= the k-th largest (ties kept; k = 0 disables). top-p drops the sorted
    entries whose cumulative probability *before* them exceeds p, so the first token crossing p and
    the top token are always kept (p outside (0, 1) disables). Both keep a prefix of the descending order, so
    the draw is #(cdf < u * cdf[last kept]) over the top-k probabilities, which is the same
    distribution as re-normalising over the kept set.

    Args:
        logits: [B, V]; temperature, top_p: [B] float; top_k: [B] long; uniforms: [B] in [0, 1).
        max_top_k: host-side max of top_k, or 0 when some row disables top-k.
    Returns: ids [B].
    """
    scores = logits / temperature.to(logits.dtype)[:, None]  # [B, V]
    values, ids = _candidates(scores, top_k, max_top_k)  # [B, W]
    width = values.shape[-1]
    k = torch.where(top_k > 0, top_k, width).clamp(max=width)[:, None]  # [B, 1]
    in_top_k = values >= values.gather(-1, k - 1)  # [B, W], a prefix
    probs = torch.softmax(values.masked_fill(~in_top_k, float("-inf")), dim=-1)
    cdf = probs.cumsum(dim=-1)  # [B, W]
    # Exclusive cumsum: the mass strictly before each entry.
    before = torch.cat([torch.zeros_like(cdf[:, :1]), cdf[:, :-1]], dim=-1)
    # As in the reference, top-p only acts for 0 < p < 1.
    p = torch.where((top_p > 0) & (top_p < 1), top_p, float("inf")).to(cdf.dtype)[:, None]  # [B, 1]
    num_kept = torch.minimum(in_top_k.sum(-1, keepdim=True), (before <= p).sum(-1, keepdim=True))
    target = uniforms.to(cdf.dtype)[:, None] * cdf.gather(-1, num_kept - 1)  # [B, 1]
    position = torch.minimum((cdf < target).sum(-1, keepdim=True), num_kept - 1)
    return ids.gather(-1, position).squeeze(-1)


def pick_tokens(
    logits: torch.Tensor,
    *,
    do_sample: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    uniforms: torch.Tensor,
    any_sample: bool = True,
    max_top_k: int = 0,
) -> torch.Tensor:
    """One id per row: argmax where `do_sample` is False, else a filtered inverse-CDF draw.

    `any_sample=False` (known on the host) skips the sampling math for all-greedy batches;
    `max_top_k` (host-side max of top_k, 0 if any row disables it) lets top-k work on a window.
    """
    greedy = greedy_pick(logits)
    if not any_sample:
        return greedy
    sampled = sample_filtered(logits, temperature, top_k, top_p, uniforms, max_top_k)
    return torch.where(do_sample.to(greedy.device), sampled, greedy)


# --------------------------------------------------------------------------------------------------
# Per-stream state and per-frame batches


class StreamSampler:
    """Sampling state of one stream: its parameters, its own generator, and the seen mask.

    Args:
        params: the request's `SamplingParams`.
        seed: seeds this stream's private `torch.Generator` (CPU).
        n_vq: number of codebooks.
        codebook_size: largest codebook size (width of the seen mask).
    """

    def __init__(self, params: SamplingParams, seed: int, n_vq: int = 16, codebook_size: int = 1024):
        self.params = params
        self.seed = int(seed)
        self.n_vq = n_vq
        self.generator = torch.Generator(device="cpu")
        self.seen = torch.zeros(n_vq, codebook_size, dtype=torch.bool)  # [K, V]
        self.num_frames = 0
        self.reset()

    def reset(self) -> None:
        """Back to the state right after construction (same seed, nothing seen)."""
        self.generator.manual_seed(self.seed)
        self.seen.zero_()
        self.num_frames = 0

    def draw_uniforms(self) -> torch.Tensor:
        """The frame's 1 + n_vq uniforms in [0, 1): text decision first, then codebooks 0..n_vq-1."""
        return torch.rand(1 + self.n_vq, generator=self.generator, dtype=torch.float32)

    def observe(self, codes: torch.Tensor | np.ndarray | Sequence[int]) -> None:
        """Record an emitted frame [n_vq] in the seen mask (repetition-penalty history)."""
        if isinstance(codes, torch.Tensor):
            codes_t = codes.detach().to(device="cpu", dtype=torch.long)
        else:
            codes_t = torch.as_tensor(np.asarray(codes), dtype=torch.long)
        self.seen[torch.arange(self.n_vq), codes_t.reshape(self.n_vq)] = True
        self.num_frames += 1


def observe_frames(samplers: Sequence[StreamSampler], codes: torch.Tensor, emitted: Sequence[bool]) -> None:
    """Update B streams' seen masks from one frame's codes [B, n_vq], skipping rows that stopped."""
    codes_cpu = codes.detach().to(device="cpu", dtype=torch.long)  # one transfer for the batch
    for sampler, row, is_emitted in zip(samplers, codes_cpu, emitted):
        if is_emitted:
            sampler.observe(row)


@dataclass(frozen=True, slots=True)
class SamplingBatch:
    """Per-row sampling parameters and randomness of one frame step ([B] tensors unless noted)."""

    do_sample: torch.Tensor  # bool
    audio_temperature: torch.Tensor
    audio_top_k: torch.Tensor  # long
    audio_top_p: torch.Tensor
    audio_repetition_penalty: torch.Tensor
    text_temperature: torch.Tensor
    text_top_k: torch.Tensor  # long, already min(k, 2) for the 2-way decision
    text_top_p: torch.Tensor
    uniforms: torch.Tensor  # [B, 1 + n_vq] float32
    seen: torch.Tensor  # [B, n_vq, V] bool
    any_sample: bool  # host-side: some row samples
    any_penalty: bool  # host-side: some row has a repetition penalty != 1
    audio_max_top_k: int  # host-side: max audio top_k, 0 if some row disables top-k
    text_max_top_k: int

    @property
    def batch_size(self) -> int:
        return int(self.uniforms.shape[0])

    @classmethod
    def for_frame(
        cls, samplers: Sequence[StreamSampler], device: torch.device | str | None = None
    ) -> SamplingBatch:
        """Stack B streams for one frame; draws 1 + n_vq uniforms from each stream's generator."""
        if not samplers:
            raise ValueError("SamplingBatch.for_frame needs at least one stream")
        params = [s.params for s in samplers]
        device = torch.device(device) if device is not None else torch.device("cpu")

        def floats(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=device)

        def longs(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=device)

        uniforms = torch.stack([s.draw_uniforms() for s in samplers])  # [B, 1 + K]
        seen = torch.stack([s.seen for s in samplers])  # [B, K, V]
        return cls(
            do_sample=torch.tensor([p.do_sample for p in params], dtype=torch.bool, device=device),
            audio_temperature=floats([p.audio_temperature for p in params]),
            audio_top_k=longs([p.audio_top_k for p in params]),
            audio_top_p=floats([p.audio_top_p for p in params]),
            audio_repetition_penalty=floats([p.audio_repetition_penalty for p in params]),
            text_temperature=floats([p.text_temperature for p in params]),
            text_top_k=longs([min(p.text_top_k, 2) for p in params]),
            text_top_p=floats([p.text_top_p for p in params]),
            uniforms=uniforms.to(device),
            seen=seen.to(device),
            any_sample=any(p.do_sample for p in params),
            any_penalty=any(p.audio_repetition_penalty != 1.0 for p in params),
            audio_max_top_k=_max_top_k([p.audio_top_k for p in params]),
            text_max_top_k=_max_top_k([min(p.text_top_k, 2) for p in params]),
        )


def _max_top_k(values: list[int]) -> int:
    return 0 if min(values) <= 0 else max(values)


def decide_continue(stop_logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """2-way continue/stop choice from [s_continue, s_stop] logits [B, 2] -> bool [B].

    Greedy rows continue iff s_continue >= s_stop (ties go to index 0). Sampling rows use the text
    temperature / top-k / top-p and the frame's first uniform; no repetition penalty.
    """
    choice = pick_tokens(
        stop_logits,
        do_sample=batch.do_sample,
        temperature=batch.text_temperature,
        top_k=batch.text_top_k,
        top_p=batch.text_top_p,
        uniforms=batch.uniforms[:, 0],
        any_sample=batch.any_sample,
        max_top_k=batch.text_max_top_k,
    )
    return choice == 0


def pick_codes(logits: torch.Tensor, channel: int, batch: SamplingBatch) -> torch.Tensor:
    """Codes [B] of codebook `channel` from its logits [B, V_k] (penalty, then greedy or sampled)."""
    if batch.any_penalty:
        seen = batch.seen[:, channel, : logits.shape[-1]]  # [B, V_k]
        logits = apply_repetition_penalty(logits, seen, batch.audio_repetition_penalty)
    return pick_tokens(
        logits,
        do_sample=batch.do_sample,
        temperature=batch.audio_temperature,
        top_k=batch.audio_top_k,
        top_p=batch.audio_top_p,
        uniforms=batch.uniforms[:, 1 + channel],
        any_sample=batch.any_sample,
        max_top_k=batch.audio_max_top_k,
    )
