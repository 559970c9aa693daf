"""The LM's per-frame step: the one definition every path runs (docs/spec/LM.md §3.3, §5).

A frame of B streams: the local transformer runs n_vq + 1 positions (position 0 decides
continue/stop, each next one draws a codebook's code), then the global transformer appends the row
[assistant slot, codes] to each stream's KV cache and returns the next hidden state. The step is a
few units (`StepUnits`): plain (`EAGER`), row-independent (`ROWS`, the CPU's batched step) or
compiled (`StepUnits.compiled`); global attention goes through an `Attender`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import fused_ops
from .kv_cache import LocalKVCache, attend_local
from .layers import Attender, DecoderStack, attention_backends, block_finish, block_qkv
from .sampling import SamplingBatch, decide_continue, pick_codes

# ---- units ---------------------------------------------------------------------------------------


def local_position(stack: DecoderStack, x: torch.Tensor, index: torch.Tensor, cos: torch.Tensor,
                   sin: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
                   key_pos: torch.Tensor) -> torch.Tensor:
    """One local-transformer position for the batch: x [B, H] -> post-ln_f [B, H].

    index: [1] long, this position; cos/sin: [1, D/2] at it; keys/values: per layer [B, nh, P, D].
    """
    h = x[:, None]  # [B, 1, H]
    for layer, block in enumerate(stack.h):
        q, k, v = block_qkv(block, h, cos, sin)
        h = block_finish(block, h, attend_local(q, k, v, keys[layer], values[layer], index, key_pos))
    return stack.ln_f(h)[:, 0]


def decide(stop_weight: torch.Tensor, local: torch.Tensor, sampling: SamplingBatch) -> torch.Tensor:
    """Continue (True) or stop [B] from the position-0 state; stop_weight [2, H] holds the text-head
    rows of (assistant slot = continue, audio end = stop)."""
    return decide_continue(F.linear(local, stop_weight).float(), sampling)  # sampling math in fp32


def pick(head: nn.Module, table: torch.Tensor, local: torch.Tensor, seen: torch.Tensor, uniforms: torch.Tensor,
         sampling: SamplingBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One codebook: logits through its head (a module, so a quantised head can stand in), then
    penalty + greedy/sampled pick. Returns code [B], its embedding [B, H] (the next local input)
    and the raw logits [B, V_k]."""
    logits = head(local)
    if fused_ops.fused_enabled(logits.device):  # one kernel for the whole pick (see fused_ops)
        audio = sampling.audio
        code = fused_ops.pick_code(logits, seen, uniforms, sampling.do_sample, audio.temperature, audio.kth_index,
                                   audio.top_p, sampling.audio_repetition_penalty)
    else:
        code = pick_codes(logits.float(), seen, uniforms, sampling)
    return code, F.embedding(code, table), logits


def embed_frame(wte: torch.Tensor, tables: list[torch.Tensor], codes: torch.Tensor, positions: torch.Tensor,
                cos_table: torch.Tensor, sin_table: torch.Tensor,
                slot_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Embedding of the generated rows [slot_id, codes [B, K]] -> x [B, 1, H], and RoPE cos/sin at
    `positions` [B] -> [B, 1, 1, 1, D/2] each (model dtype). Same sums in the same order as
    `embed_rows`; sampled codes are never the pad id, so no mask is needed."""
    h = wte[slot_id].expand(codes.shape[0], 1, -1)  # [B, 1, H]
    for k, table in enumerate(tables):
        h = h + F.embedding(codes[:, k : k + 1], table)
    cos = cos_table[positions].to(h.dtype)[:, None, None, None]
    sin = sin_table[positions].to(h.dtype)[:, None, None, None]
    return h, cos, sin


def final_norm(ln_f: nn.Module, h: torch.Tensor) -> torch.Tensor:
    return ln_f(h)[:, 0]


def prefill_stack(stack: DecoderStack, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  keys: list[torch.Tensor], values: list[torch.Tensor], slot_index: torch.Tensor) -> torch.Tensor:
    """Prompts of P fresh slots through the global stack at once: x [P, T, H] right-padded rows,
    cos/sin [1, T, 1, 1, D/2]; keys/values land in columns 0..T-1 of rows `slot_index` [P] (causal:
    real rows never see the padding, so each slot gets its own prefill up to rounding). Returns
    post-ln_f states [P, T, H]."""
    length = x.shape[1]
    h = x
    for layer, block in enumerate(stack.h):
        q, k, v = block_qkv(block, h, cos, sin)
        keys[layer][slot_index, :, :length] = k
        values[layer][slot_index, :, :length] = v
        h = block_finish(block, h, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    return stack.ln_f(h)


def prefill_after_prefix(stack: DecoderStack, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         keys: list[torch.Tensor], values: list[torch.Tensor], slot_index: torch.Tensor) -> torch.Tensor:
    """`prefill_stack` for rows x [P, T, H] after a prefix already in columns 0..start-1, attending
    causally over it and themselves. cos/sin [1, end, 1, 1, D/2] cover 0..end-1, so start = end - T
    (one compiled graph for every prefix and text length). Returns post-ln_f states [P, T, H]."""
    end = cos.shape[1]
    start = end - x.shape[1]
    cos, sin = cos[:, start:], sin[:, start:]
    positions = torch.arange(end, device=x.device)
    mask = positions[None, :] <= positions[start:, None]  # [T, end]: query start + i sees keys 0..start + i
    h = x
    for layer, block in enumerate(stack.h):
        q, k, v = block_qkv(block, h, cos, sin)
        keys[layer][slot_index, :, start:end] = k
        values[layer][slot_index, :, start:end] = v
        past_k, past_v = keys[layer][slot_index, :, :end], values[layer][slot_index, :, :end]  # [P, nh, end, D]
        h = block_finish(block, h, F.scaled_dot_product_attention(q, past_k, past_v, attn_mask=mask))
    return stack.ln_f(h)


@dataclass(frozen=True)
class StepUnits:
    """The callables a frame step is made of (plain functions, or their compiled versions)."""

    local: Callable = local_position
    decide: Callable = decide
    pick: Callable = pick
    embed: Callable = embed_frame
    qkv: Callable = block_qkv
    finish: Callable = block_finish
    norm: Callable = final_norm
    prefill: Callable = prefill_stack
    prefill_after: Callable = prefill_after_prefix

    @classmethod
    @functools.cache
    def compiled(cls, backend: str = "inductor") -> StepUnits:
        """Each unit through torch.compile (whole-graph; batch dims dynamic from B = 2 up). One set
        per backend for the process, so every runner and model (their tensors are graph inputs)
        reuses what was compiled instead of tracing again."""
        compile_unit = _compiler(backend)
        # Second argument: positions of the arguments whose dim 0 is the batch. The prefill compiles
        # once for any prompt length and cache size: (argument, dim) pairs marked dynamic. Eager, a
        # burst's prefill after a cached voice prefix is bound by its kernel launches, not the GPU.
        prompt_dims = ((1, 1), (2, 1), (3, 1), (4, 0), (4, 2), (5, 0), (5, 2))
        return cls(local=compile_unit(local_position, (1, 5, 6)), decide=compile_unit(decide, (1, 2)),
                   pick=compile_unit(pick, (2, 3, 4, 5)), embed=compile_unit(embed_frame, (2, 3)),
                   qkv=compile_unit(block_qkv, (1, 2, 3)), finish=compile_unit(block_finish, (1, 2)),
                   norm=compile_unit(final_norm, (1,)),
                   prefill=compile_unit(prefill_stack, (1, 6), prompt_dims),
                   prefill_after=compile_unit(prefill_after_prefix, (1, 6), prompt_dims))


EAGER = StepUnits()


def local_position_rows(stack: DecoderStack, x: torch.Tensor, index: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
                        key_pos: torch.Tensor) -> torch.Tensor:
    """`local_position` with its attention as two batched matrix products around a softmax, which
    compute each row alone (SDPA's CPU kernel splits work by batch size; its math-backend switch is
    process-wide, and the codec thread attends meanwhile)."""
    h = x[:, None]  # [B, 1, H]
    visible = key_pos <= index  # [P]
    for layer, block in enumerate(stack.h):
        q, k, v = block_qkv(block, h, cos, sin)
        keys[layer].index_copy_(2, index, k)
        values[layer].index_copy_(2, index, v)
        scores = torch.matmul(q, keys[layer].transpose(-1, -2)) * q.shape[-1] ** -0.5  # [B, nh, 1, P]
        weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        h = block_finish(block, h, torch.matmul(weights, values[layer]))
    return stack.ln_f(h)[:, 0]


def decide_rows(stop_weight: torch.Tensor, local: torch.Tensor, sampling: SamplingBatch) -> torch.Tensor:
    """`decide` with the two stop logits as plain dot products (a product and a sum per row), which
    round the same for any number of rows; a CPU matrix product of 1 row and of 2 does not."""
    logits = (local[:, None, :] * stop_weight[None]).sum(-1)  # [B, 2]
    return decide_continue(logits.float(), sampling)


# The CPU runner's batched step: every unit computes each row as it would alone, given linears
# that do (`row_linear.py`, for the LM's linears named by ROW_LINEARS: those a step runs; of the
# text head only two rows are used) and an attender that does (`kv_cache.RowDecodeAttender`).
ROWS = StepUnits(local=local_position_rows, decide=decide_rows)
ROW_LINEARS = ("transformer.h.", "local_transformer.h.", "audio_lm_heads.")


# ---- the step ------------------------------------------------------------------------------------


def frame(lm, hidden: torch.Tensor, sampling: SamplingBatch, local: LocalKVCache, units: StepUnits = EAGER,
          trace: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Decide continue/stop and draw the frame's codes for B streams.

    Args:
        lm: the `MossTTSNanoLM`.
        hidden: [B, H] post-ln_f global states of each stream's last row.
        sampling: the frame's `SamplingBatch` (B rows).
        local: scratch state with at least B rows (`lm.new_local_cache`).
        trace: if given, receives the raw audio logits [B, V_k] of every codebook.
    Returns:
        is_continue [B] bool, codes [B, n_vq] long (meaningless for rows that stop).
    """
    batch = hidden.shape[0]
    if sampling.uniforms.shape[0] != batch:
        raise ValueError(f"sampling has {sampling.uniforms.shape[0]} rows for {batch} hidden states")
    keys, values = local.keys_values(batch)
    stack = lm.local_transformer
    with attention_backends():
        h = units.local(stack, hidden, local.index[0], local.cos[0], local.sin[0], keys, values, local.key_pos)
        is_continue = units.decide(local.stop_weight, h, sampling)
        # Position 1 holds the continue token's embedding (stopping rows are ignored by the caller).
        x = local.first_input[:batch]
        codes = []
        for k in range(lm.config.n_vq):
            p = k + 1
            h = units.local(stack, x, local.index[p], local.cos[p], local.sin[p], keys, values, local.key_pos)
            code, x, logits = units.pick(lm.audio_lm_heads[k], lm.audio_embeddings[k].weight, h,
                                         sampling.seen[:, k], sampling.uniforms[:, p], sampling)
            if trace is not None:
                trace.append(logits)
            codes.append(code)
    return is_continue, torch.stack(codes, dim=1)


def global_step(lm, codes: torch.Tensor, positions: torch.Tensor, attender: Attender, rope_len: int,
                units: StepUnits = EAGER) -> torch.Tensor:
    """Append the generated rows [assistant slot, codes [B, K]] at `positions` [B] and return each
    stream's next hidden state [B, H]. `attender` stores the keys/values and attends; `rope_len`
    bounds the positions (the RoPE table is grown to it outside any capture)."""
    cos_table, sin_table = lm.rope.get(rope_len, codes.device)
    tables = [e.weight for e in lm.audio_embeddings]
    with attention_backends():
        h, cos, sin = units.embed(lm.transformer.wte.weight, tables, codes, positions, cos_table, sin_table,
                                  lm.config.audio_assistant_slot_id)
        for layer, block in enumerate(lm.transformer.h):
            q, k, v = units.qkv(block, h, cos, sin)
            h = units.finish(block, h, attender.attend(layer, q, k, v))
        return units.norm(lm.transformer.ln_f, h)


# ---- compilation -----------------------------------------------------------------------------------


def _mark_batch_dims(value, dim: int = 0) -> None:
    """Mark `dim` of every tensor in `value` (tensors, lists, dataclasses such as SamplingBatch) dynamic."""
    if isinstance(value, torch.Tensor):
        if value.ndim > dim and value.shape[dim] > 1:
            torch._dynamo.maybe_mark_dynamic(value, dim)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _mark_batch_dims(item, dim)
    elif is_dataclass(value):
        for field in fields(value):
            _mark_batch_dims(getattr(value, field.name), dim)


def _compiler(backend: str):
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    options = {}
    if backend == "inductor" and hasattr(inductor_config, "emulate_precision_casts"):
        options["emulate_precision_casts"] = True  # round bf16 intermediates as eager does
    # Each unit compiles per (B = 1, B >= 2) and per model: allow a few variants.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 32))
            break

    def compile_unit(fn, batched=(), other_dims=()):
        compiled = torch.compile(fn, fullgraph=True, dynamic=None, backend=backend, options=options or None)

        def call(*args):
            # Batch dims vary with the bucket: one graph for B >= 2, one for B = 1 (specialised).
            for index in batched:
                _mark_batch_dims(args[index])
            for index, dim in other_dims:
                _mark_batch_dims(args[index], dim)
            return compiled(*args)

        call.__name__ = f"compiled_{fn.__name__}"
        return call

    return compile_unit
