"""Token selection for the local transformer (docs/spec/LM.md §5.2), vectorised over a batch of streams.

Pure functions: they take their randomness as uniforms supplied by the caller, so nothing here
touches a global RNG, and they know nothing of requests (the engine turns each stream's
`SamplingParams` and its private generator into a `SamplingBatch`, see `engine/sampler.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

# --------------------------------------------------------------------------------------------------
# Pure math


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Penalise ids already generated: s < 0 -> s * rp, else s / rp, only where `seen` [B, V] bool
    (this codebook's history). logits: [B, V]; penalty: [B] (1.0 leaves a row unchanged bit for bit)."""
    rp = penalty.to(logits.dtype)[:, None]  # [B, 1]
    penalised = torch.where(logits < 0, logits * rp, logits / rp)
    return torch.where(seen, penalised, logits)


def greedy_pick(logits: torch.Tensor) -> torch.Tensor:
    """Argmax over the last dim; ties resolve to the first index (torch.argmax guarantees it)."""
    return logits.argmax(dim=-1)


# The narrowest top-k window the CPU path sorts (see `FilterParams.build`).
MIN_WINDOW = 16


@dataclass(frozen=True, slots=True)
class FilterParams:
    """Per-row temperature / top-k / top-p of one head, prepared once per frame on the host.

    Use `FilterParams.build`; the fields are already in the form the math needs.
    """

    temperature: torch.Tensor  # [B, 1]
    kth_index: torch.Tensor  # [B, 1] long: k - 1, with k = V when top-k is off (k = 0) and k <= V
    top_p: torch.Tensor  # [B, 1]; +inf where top-p is off (p outside (0, 1), as in the reference)
    window: int  # host: top-(window + 1) holds every top-k survivor; 0 = sort the whole row
    vocab: int  # the row width these were built for

    @classmethod
    def build(
        cls,
        temperature: Sequence[float],
        top_k: Sequence[int],
        top_p: Sequence[float],
        vocab: int,
        device: torch.device | str | None = None,
    ) -> FilterParams:
        ks = [kth_index(k, vocab) + 1 for k in top_k]
        # At least MIN_WINDOW wide: a CPU softmax sums rows narrower than its vector width in
        # another order, so a row's draw would depend on the widest top-k beside it.
        window = max(*ks, MIN_WINDOW) if all(0 < k < vocab for k in top_k) else 0
        return cls(
            temperature=torch.tensor(temperature, dtype=torch.float32, device=device)[:, None],
            kth_index=torch.tensor([k - 1 for k in ks], dtype=torch.long, device=device)[:, None],
            top_p=torch.tensor([top_p_bound(p) for p in top_p], dtype=torch.float32, device=device)[:, None],
            window=window,
            vocab=vocab,
        )


def kth_index(top_k: int, vocab: int) -> int:
    """Index of the k-th largest score top-k keeps: k - 1, with k = vocab when top-k is off (k <= 0)."""
    return (vocab if top_k <= 0 else min(int(top_k), vocab)) - 1


def top_p_bound(top_p: float) -> float:
    """The top-p threshold the math uses: p, or +inf where top-p is off (p outside (0, 1))."""
    return top_p if 0.0 < top_p < 1.0 else float("inf")


def _ties_overflow(values: torch.Tensor, threshold: torch.Tensor) -> bool:
    """True if some row's k-th score ties with the first score outside the window (CPU tensors)."""
    last = values[:, -1].float().numpy()  # host arrays: far cheaper than a torch reduction here
    return bool((last >= threshold[:, 0].float().numpy()).any())


def sample_filtered(logits: torch.Tensor, params: FilterParams, uniforms: torch.Tensor) -> torch.Tensor:
    """Temperature, top-k, top-p (the reference order), then one inverse-CDF draw per row: ids [B]
    from logits [B, V], the rows' `FilterParams` and uniforms [B] in [0, 1). top-k keeps every score
    >= the k-th (ties kept); top-p drops the entries whose cumulative probability *before* them
    exceeds p. Both keep a prefix of the order, so the draw is #(cdf < u * cdf[last kept])."""
    scores = logits / params.temperature.to(logits.dtype)  # [B, V]
    vocab = scores.shape[-1]
    kth_index = params.kth_index
    if vocab != params.vocab:  # a smaller codebook than the one the params were built for
        kth_index = kth_index.clamp(max=vocab - 1)
    values = ids = threshold = None
    # A top-k window avoids sorting all V scores. Checking that no tie runs past the window needs
    # the values on the host, so the GPU simply sorts (one kernel, no sync, graph-capturable).
    if 0 < params.window < vocab - 1 and scores.device.type == "cpu":
        values, ids = torch.topk(scores, params.window + 1, dim=-1)  # [B, W + 1], descending
        threshold = values.gather(-1, kth_index)  # [B, 1]
        if _ties_overflow(values, threshold):
            values = None
        else:
            values, ids = values[:, :-1], ids[:, :-1]
    if values is None:
        values, ids = torch.sort(scores, dim=-1, descending=True)
        threshold = values.gather(-1, kth_index)
    in_top_k = values >= threshold  # [B, W], a prefix
    probs = torch.softmax(torch.where(in_top_k, values, float("-inf")), dim=-1)
    cdf = probs.cumsum(dim=-1)  # [B, W]
    # Kept by top-p: entry 0, plus every entry i >= 1 with cdf[i - 1] <= p.
    num_p = (cdf[:, :-1] <= params.top_p.to(cdf.dtype)).sum(-1, keepdim=True) + 1
    num_kept = torch.minimum(in_top_k.sum(-1, keepdim=True), num_p)  # [B, 1]
    target = uniforms.to(cdf.dtype)[:, None] * cdf.gather(-1, num_kept - 1)  # [B, 1]
    position = torch.minimum((cdf < target).sum(-1, keepdim=True), num_kept - 1)
    return ids.gather(-1, position).squeeze(-1)


def pick_tokens(
    logits: torch.Tensor,
    *,
    do_sample: torch.Tensor,
    filters: FilterParams,
    uniforms: torch.Tensor,
    any_sample: bool = True,
    all_sample: bool = False,
) -> torch.Tensor:
    """One id per row: argmax where `do_sample` is False, else a filtered inverse-CDF draw.

    `any_sample` / `all_sample` (known on the host) skip the unneeded half for uniform batches.
    """
    if not any_sample:
        return greedy_pick(logits)
    sampled = sample_filtered(logits, filters, uniforms)
    if all_sample:
        return sampled
    return torch.where(do_sample.to(sampled.device), sampled, greedy_pick(logits))


@dataclass(frozen=True, slots=True)
class SamplingBatch:
    """Per-row sampling parameters and randomness of one frame step (B rows)."""

    do_sample: torch.Tensor  # [B] bool
    audio: FilterParams
    audio_repetition_penalty: torch.Tensor  # [B]
    text: FilterParams  # for the 2-way continue/stop decision
    uniforms: torch.Tensor  # [B, 1 + n_vq] float32
    seen: torch.Tensor  # [B, n_vq, V] bool
    any_sample: bool  # host-side: some row samples
    all_sample: bool  # host-side: every row samples
    any_penalty: bool  # host-side: some row has a repetition penalty != 1

    @property
    def batch_size(self) -> int:
        return int(self.uniforms.shape[0])


def decide_continue(stop_logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """2-way continue/stop choice from [s_continue, s_stop] logits [B, 2] -> bool [B]. Greedy rows
    continue iff s_continue >= s_stop; sampling rows use the text temperature / top-k (min(k, 2)) /
    top-p and the frame's first uniform; no repetition penalty."""
    choice = pick_tokens(
        stop_logits,
        do_sample=batch.do_sample,
        filters=batch.text,
        uniforms=batch.uniforms[:, 0],
        any_sample=batch.any_sample,
        all_sample=batch.all_sample,
    )
    return choice == 0


def pick_codes(logits: torch.Tensor, seen: torch.Tensor, uniforms: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """Codes [B] of one codebook from its logits [B, V_k]: repetition penalty, then greedy or sampled.
    seen: [B, V] this codebook's history (the first V_k columns are read); uniforms: [B]."""
    if batch.any_penalty:
        logits = apply_repetition_penalty(logits, seen[:, : logits.shape[-1]], batch.audio_repetition_penalty)
    return pick_tokens(
        logits,
        do_sample=batch.do_sample,
        filters=batch.audio,
        uniforms=uniforms,
        any_sample=batch.any_sample,
        all_sample=batch.all_sample,
    )
