"""Static-shape decode step of the runner, captured as CUDA graphs per batch-size bucket.

A step for bucket B works on rows 0..B-1 of the runner's state (KV cache, hidden states, codec
rings, sampling tables): a batch is padded to the smallest bucket that holds its highest slot, and
the rows it does not step are masked (they keep their state; the runner gives its state spare rows
so every bucket fits). All per-step host data goes in through one small copy into a static input
buffer, and comes back through one copy out of a static output buffer, so the captured work never
sees a host value:

- LM step: local transformer over the 17 positions with sampling (stop decision + 16 codes), the
  repetition history update, then the one-row global decode into the static KV cache, attending
  over the cache's fixed length under a mask built on the device from per-row lengths.
- Codec step: streaming decode of 1, 2 or 4 frames (one graph each) for the bucket's rows.

Per-stream uniforms are drawn on the host from each stream's own generator, so codes never depend
on which streams share the batch. With graphs off (`enforce_eager`, TTS_NO_CUDA_GRAPH=1, or a CPU
device) the very same functions run eagerly.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config import SamplingParams
from ..env import env_flag
from ..model.layers import apply_rope, attention_backends, gelu_new
from ..sampling import FilterParams, SamplingBatch, apply_repetition_penalty, pick_tokens

logger = logging.getLogger(__name__)

NO_GRAPH_ENV = "TTS_NO_CUDA_GRAPH"
NO_COMPILE_ENV = "TTS_NO_COMPILE"
CODEC_PASS_FRAMES = (1, 2, 4)  # codec graphs per bucket: frames decoded by one pass (one replay)
MAX_PASSES_PER_COPY = 16  # codec passes staged per host-to-device copy in `decode`


def bucket_sizes(num_slots: int) -> list[int]:
    """Batch-size buckets 1, 2, 4, ... up to the first power of two >= num_slots."""
    if num_slots < 1:
        raise ValueError(f"num_slots must be >= 1, got {num_slots}")
    sizes = [1]
    while sizes[-1] < num_slots:
        sizes.append(2 * sizes[-1])
    return sizes


def pick_bucket(num_rows: int, buckets: list[int]) -> int:
    """Smallest bucket holding `num_rows` rows (buckets ascending)."""
    for size in buckets:
        if size >= num_rows:
            return size
    raise ValueError(f"{num_rows} rows exceed the largest bucket {buckets[-1]}")


def graphs_enabled(device: torch.device, enforce_eager: bool) -> bool:
    """CUDA graphs are used on CUDA unless `enforce_eager` or TTS_NO_CUDA_GRAPH=1."""
    return device.type == "cuda" and not enforce_eager and not env_flag(NO_GRAPH_ENV)


def compile_mode(device: torch.device, requested: str | None = None) -> str:
    """How the LM step's fused units run: "inductor" (torch.compile), "eager" (the same units
    uncompiled: tests) or "off" (the original per-op step).

    Default: "inductor" on CUDA unless TTS_NO_COMPILE=1; "off" on CPU (the CPU path never compiles).
    """
    if requested is not None:
        if requested not in ("inductor", "eager", "off"):
            raise ValueError(f"compile mode must be inductor, eager or off, got {requested!r}")
        return requested
    return "inductor" if device.type == "cuda" and not env_flag(NO_COMPILE_ENV) else "off"


def split_passes(num_frames: int, sizes: list[int]) -> list[int]:
    """Frames per codec pass for `num_frames` frames, largest passes first (e.g. 7 -> [4, 2, 1])."""
    passes = []
    for size in sorted(sizes, reverse=True):
        while num_frames >= size:
            passes.append(size)
            num_frames -= size
    assert num_frames == 0, f"pass sizes {sizes} must include 1"
    return passes


def padded_step_input(slots: list[int], uniforms: np.ndarray, has_room: np.ndarray, bucket: int) -> np.ndarray:
    """Host rows of one LM step for a bucket: [bucket, 1 + n_vq + 1] float32 = uniforms | step flag.

    Row s holds slot s; rows not stepped stay zero (flag 0: their state is left alone).
    """
    width = uniforms.shape[1] + 1
    rows = np.zeros((bucket, width), np.float32)
    rows[slots, :-1] = uniforms
    rows[slots, -1] = has_room
    return rows


def _param_row(params: SamplingParams, vocab: int) -> list[float]:
    """One slot's sampling parameters as floats (ids up to 2^24 are exact in float32)."""
    audio = FilterParams.build([params.audio_temperature], [params.audio_top_k], [params.audio_top_p], vocab=vocab)
    text = FilterParams.build([params.text_temperature], [params.text_top_k], [params.text_top_p], vocab=2)
    return [float(params.do_sample), float(audio.temperature), float(audio.kth_index), float(audio.top_p),
            float(params.audio_repetition_penalty), float(text.temperature), float(text.kth_index),
            float(text.top_p)]


# ---- fused units of the LM step (torch.compile'd on CUDA) -------------------------------------
#
# The same math as `MossTTSNanoLM._frame` / `decode_static`, as a few pure functions over explicit
# tensors (weights, caches, per-position constants), so each compiles once per batch shape and is
# called many times: one local position, one code pick, the stop decision, the global row
# embedding, and the parts of a global layer before and after its cached attention (which stays
# the eager SDPA over the static KV cache). Inductor fuses each unit's pointwise work, cutting the
# ~1,300 kernels of a frame step to a few hundred.


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _unit_local(x, pos, cos, sin, keys, values, layers, ln_f, eps: float):
    """One local-transformer position for the batch: x [B, H] -> post-ln_f [B, H].

    pos: [1] long, this position; cos/sin [1, D/2] (model dtype) at that position; keys/values per
    layer [B, nh, P, D] (written at `pos`; attention covers positions 0..pos through a mask).
    """
    h = x[:, None]  # [B, 1, H]
    batch, hidden = x.shape
    head_dim = 2 * cos.shape[-1]
    heads = hidden // head_dim
    visible = torch.arange(keys[0].shape[2], device=x.device) <= pos  # [P]
    for (ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, in_w, in_b, out_w, out_b), kc, vc in zip(
            layers, keys, values):
        qkv = F.linear(_layer_norm(h, ln1_w, ln1_b, eps), attn_w, attn_b).view(batch, 1, 3, heads, head_dim)
        qk = apply_rope(qkv[:, :, :2], cos, sin)  # [B, 1, 2, nh, D]
        kc.index_copy_(2, pos, qk[:, 0, 1, :, None, :])
        vc.index_copy_(2, pos, qkv[:, 0, 2, :, None, :])
        q = qk[:, 0, 0].float() * head_dim**-0.5  # [B, nh, D]
        scores = (q[:, :, None, :] * kc.float()).sum(-1)  # [B, nh, P]
        probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        attn = (probs[..., None] * vc.float()).sum(-2).to(h.dtype)  # [B, nh, D]
        h = h + F.linear(attn.reshape(batch, 1, hidden), proj_w, proj_b)
        h = h + F.linear(gelu_new(F.linear(_layer_norm(h, ln2_w, ln2_b, eps), in_w, in_b)), out_w, out_b)
    return _layer_norm(h, ln_f[0], ln_f[1], eps)[:, 0]


def _unit_decide(local, stop_weight, params, uniforms):
    """`decide_continue` from the position-0 state: params [B, 8] as in `_param_row`, uniforms [B, 1 + K]."""
    stop = F.linear(local, stop_weight).float()  # [B, 2]
    text = FilterParams(params[:, 5:6], params[:, 6:7].long(), params[:, 7:8], window=0, vocab=2)
    choice = pick_tokens(stop, do_sample=params[:, 0] > 0.5, filters=text, uniforms=uniforms[:, 0],
                         any_sample=True, all_sample=False)
    return choice == 0


def _unit_pick(local, head_weight, table, seen, column, params, uniforms, vocab: int):
    """`pick_codes` for one codebook (penalty, then greedy or sampled) and the next local input.

    seen [B, V] this codebook's history; column [1] long, this codebook's uniform column.
    Returns code [B] long and its embedding [B, H].
    """
    logits = apply_repetition_penalty(F.linear(local, head_weight).float(), seen, params[:, 4])
    audio = FilterParams(params[:, 1:2], params[:, 2:3].long(), params[:, 3:4], window=0, vocab=vocab)
    code = pick_tokens(logits, do_sample=params[:, 0] > 0.5, filters=audio,
                       uniforms=uniforms.index_select(1, column)[:, 0], any_sample=True, all_sample=False)
    return code, F.embedding(code, table)


def _unit_embed(codes, slot_id, wte, tables, cos_table, sin_table, positions, pad_id: int):
    """`embed_rows(frame_rows(codes))` for the global step -> x [B, 1, H], and RoPE cos/sin at
    `positions` [B] -> [B, 1, 1, 1, D/2] each (model dtype)."""
    h = F.embedding(slot_id.expand(codes.shape[0])[:, None], wte)  # [B, 1, H]
    codes = codes[:, None]  # [B, 1, K]
    is_code = codes != pad_id
    safe = codes.masked_fill(~is_code, 0)
    keep = is_code.to(h.dtype)
    for k, table in enumerate(tables):
        h = h + F.embedding(safe[..., k], table) * keep[..., k, None]
    cos = cos_table[positions].to(h.dtype)[:, None, None, None]
    sin = sin_table[positions].to(h.dtype)[:, None, None, None]
    return h, cos, sin


def _unit_pre(h, cos, sin, ln1_w, ln1_b, attn_w, attn_b, eps: float):
    """Global layer up to its attention: h [B, 1, H] -> q, k, v [B, nh, 1, D] (q, k rotated)."""
    batch, _, hidden = h.shape
    head_dim = 2 * cos.shape[-1]
    qkv = F.linear(_layer_norm(h, ln1_w, ln1_b, eps), attn_w, attn_b).view(batch, 1, 3, hidden // head_dim, head_dim)
    qk = apply_rope(qkv[:, :, :2], cos, sin)
    return qk[:, :, 0].transpose(1, 2), qk[:, :, 1].transpose(1, 2), qkv[:, :, 2].transpose(1, 2)


def _unit_post(h, attn, proj_w, proj_b, ln2_w, ln2_b, in_w, in_b, out_w, out_b, eps: float):
    """Global layer after its attention (attn [B, nh, 1, D]) -> next h [B, 1, H]."""
    batch, seq, hidden = h.shape
    h = h + F.linear(attn.transpose(1, 2).reshape(batch, seq, hidden), proj_w, proj_b)
    return h + F.linear(gelu_new(F.linear(_layer_norm(h, ln2_w, ln2_b, eps), in_w, in_b)), out_w, out_b)


def _unit_book(is_stepped, is_continue, lengths, key_pos, scratch_col: int, mask_dtype: torch.dtype):
    """go [B], write columns [B] and the additive key mask [B, 1, 1, L] of the global step."""
    go = is_stepped & is_continue
    write_pos = torch.where(go, lengths, torch.full_like(lengths, scratch_col))
    visible = key_pos[None, :] <= lengths[:, None]
    key_mask = torch.zeros(visible.shape, dtype=mask_dtype, device=lengths.device)
    key_mask = key_mask.masked_fill(~visible, float("-inf"))[:, None, None, :]
    return go, write_pos, key_mask


def _block_weights(block) -> tuple[torch.Tensor, ...]:
    return (block.ln_1.weight, block.ln_1.bias, block.attn.c_attn.weight, block.attn.c_attn.bias,
            block.attn.c_proj.weight, block.attn.c_proj.bias, block.ln_2.weight, block.ln_2.bias,
            block.mlp.fc_in.weight, block.mlp.fc_in.bias, block.mlp.fc_out.weight, block.mlp.fc_out.bias)


def fusable(lm) -> bool:
    """The fused units read plain `nn.Linear` / `nn.LayerNorm` weights (not quantised modules)."""
    blocks = list(lm.transformer.h) + list(lm.local_transformer.h)
    linears = [m for b in blocks for m in (b.attn.c_attn, b.attn.c_proj, b.mlp.fc_in, b.mlp.fc_out)]
    linears += list(lm.audio_lm_heads)
    norms = [m for b in blocks for m in (b.ln_1, b.ln_2)] + [lm.transformer.ln_f, lm.local_transformer.ln_f]
    return (all(type(m) is nn.Linear for m in linears) and all(type(m) is nn.LayerNorm for m in norms)
            and all(m.bias is not None for b in blocks for m in (b.attn.c_attn, b.mlp.fc_in)))


class FusedLM:
    """The LM frame step of `StaticStepper` through the fused units (compiled with inductor or run
    as plain functions). Holds its own local KV cache and per-position constants, so nothing it
    reads is created per step."""

    def __init__(self, lm, rows: int, max_len: int, device: torch.device, mode: str):
        c = lm.config
        self.config = c
        self.eps = float(c.layer_norm_eps)
        dtype = lm.dtype
        positions = c.local_max_len  # n_vq + 1
        self.local_layers = [_block_weights(b) for b in lm.local_transformer.h]
        self.local_ln_f = (lm.local_transformer.ln_f.weight, lm.local_transformer.ln_f.bias)
        self.global_layers = [_block_weights(b) for b in lm.transformer.h]
        self.ln_f = (lm.transformer.ln_f.weight, lm.transformer.ln_f.bias)
        self.wte = lm.transformer.wte.weight
        self.tables = [e.weight for e in lm.audio_embeddings]
        self.heads = [h.weight for h in lm.audio_lm_heads]
        self.stop_weight = torch.stack((self.wte[c.audio_assistant_slot_id], self.wte[c.audio_end_id]))
        self.slot_id = torch.tensor([c.audio_assistant_slot_id], device=device)
        with torch.inference_mode():  # like every later local input (one compiled variant for all)
            self.first_input = self.wte[c.audio_assistant_slot_id].expand(rows, -1).contiguous()  # [R, H]
        self.vocab = max(c.audio_codebook_sizes)
        shape = (rows, c.num_heads, positions, c.head_dim)
        self.local_k = [torch.zeros(shape, device=device, dtype=dtype) for _ in lm.local_transformer.h]
        self.local_v = [torch.zeros(shape, device=device, dtype=dtype) for _ in lm.local_transformer.h]
        cos, sin = lm.rope.get(max(max_len, positions), device)  # fp32 tables
        self.cos_table, self.sin_table = cos, sin
        # Separate small tensors per position / codebook (aligned inputs, no per-step indexing).
        self.pos = [torch.tensor([p], device=device) for p in range(positions)]
        self.local_cos = [cos[p : p + 1].to(dtype).clone() for p in range(positions)]
        self.local_sin = [sin[p : p + 1].to(dtype).clone() for p in range(positions)]
        self.columns = [torch.tensor([1 + k], device=device) for k in range(c.n_vq)]
        wrap = _compiler(mode)
        # Second argument: positions of the arguments whose dim 0 is the batch.
        self.local = wrap(_unit_local, (0, 4, 5))
        self.decide = wrap(_unit_decide, (0, 2, 3))
        self.pick = wrap(_unit_pick, (0, 3, 5, 6))
        self.embed = wrap(_unit_embed, (0, 6))
        self.pre = wrap(_unit_pre, (0, 1, 2))
        self.post = wrap(_unit_post, (0, 1))
        self.book = wrap(_unit_book, (0, 1, 2))

    def frame(self, hidden, params, uniforms, seen):
        """(is_continue [B], codes [B, K]) as `generate_frame_static` gives them."""
        b = hidden.shape[0]
        keys, values = [k[:b] for k in self.local_k], [v[:b] for v in self.local_v]
        hidden = hidden.clone()  # an inference tensor, as the other local inputs (no second variant)
        local = self.local(hidden, self.pos[0], self.local_cos[0], self.local_sin[0], keys, values,
                           self.local_layers, self.local_ln_f, self.eps)
        is_continue = self.decide(local, self.stop_weight, params, uniforms)
        x = self.first_input[:b]
        codes = []
        for k in range(self.config.n_vq):
            local = self.local(x, self.pos[k + 1], self.local_cos[k + 1], self.local_sin[k + 1], keys, values,
                               self.local_layers, self.local_ln_f, self.eps)
            size = self.heads[k].shape[0]
            code, x = self.pick(local, self.heads[k], self.tables[k], seen[:, k, :size], self.columns[k],
                                params, uniforms, self.vocab)
            codes.append(code)
        return is_continue, torch.stack(codes, dim=1)

    def decode(self, codes, cache, positions, write_pos, key_mask):
        """`decode_static` (rows 0..B-1 of `cache`) -> hidden [B, H]."""
        from ..model.kv_cache import StaticDecodeAttender

        h, cos, sin = self.embed(codes, self.slot_id, self.wte, self.tables, self.cos_table, self.sin_table,
                                 positions, self.config.audio_pad_id)
        attender = StaticDecodeAttender(cache, write_pos, key_mask)
        for index, w in enumerate(self.global_layers):
            q, k, v = self.pre(h, cos, sin, w[0], w[1], w[2], w[3], self.eps)
            attn = attender.attend(index, q, k, v)
            h = self.post(h, attn, *w[4:], self.eps)
        return _layer_norm(h, self.ln_f[0], self.ln_f[1], self.eps)[:, 0]


_BACKEND = "inductor"  # tests may swap in "aot_eager" to check tracing quickly on CPU


def _compiler(mode: str):
    """Identity for "eager"; else torch.compile (inductor, whole-graph, batch dims dynamic)."""
    if mode == "eager":
        return lambda fn, batched=(): fn
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    options = {}
    if _BACKEND == "inductor" and hasattr(inductor_config, "emulate_precision_casts"):
        options["emulate_precision_casts"] = True  # round bf16 intermediates as eager does
    # Each unit compiles per (model dtype/shapes, device, B = 1 or B >= 2): allow a few models.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 32))
            break

    def wrap(fn, batched=()):
        compiled = torch.compile(fn, fullgraph=True, dynamic=None, backend=_BACKEND,
                                 options=options or None)

        def call(*args):
            # Batch dims vary with the bucket: one graph for B >= 2, one for B = 1 (specialised).
            for index in batched:
                for t in (args[index] if isinstance(args[index], (list, tuple)) else (args[index],)):
                    if t.shape[0] > 1:
                        torch._dynamo.maybe_mark_dynamic(t, 0)
            return compiled(*args)

        return call

    return wrap


class StaticStepper:
    """Static buffers and per-bucket step functions over the runner's state (graphed on CUDA).

    Args:
        lm, codec: the models (eval, on `device`).
        cache: the runner's `KVCache`; its last column is scratch (rows that do not advance write there).
        codec_state: the runner's `CodecDecodeState` (same number of rows as the cache).
        hidden: the runner's [rows, H] last hidden state per slot.
        buckets: ascending batch sizes; the largest must not exceed the state's rows.
        use_graphs: capture CUDA graphs (CUDA only); else run the same functions eagerly.
    """

    def __init__(self, lm, codec, cache, codec_state, hidden: torch.Tensor, *, buckets: list[int],
                 use_graphs: bool, compile: str | None = None):
        self.lm = lm
        self.codec = codec
        self.cache = cache
        self.codec_state = codec_state
        self.hidden = hidden
        self.buckets = list(buckets)
        self.device = hidden.device
        rows = cache.num_slots
        if self.buckets[-1] > rows or codec_state.batch_size != rows:
            raise ValueError(f"buckets {self.buckets} need state rows >= {self.buckets[-1]}, got {rows}")
        c = lm.config
        self.n_vq = c.n_vq
        self.vocab = max(c.audio_codebook_sizes)
        dev = self.device
        # Per-slot sampling parameters, one float row per slot written when a stream begins (one
        # host-to-device copy): do_sample, then FilterParams' encoding of the audio and text heads.
        self.params = torch.tensor([_param_row(SamplingParams.greedy(), self.vocab)] * rows, device=dev)
        self.seen = torch.zeros(rows, self.n_vq, self.vocab, dtype=torch.bool, device=dev)  # [R, K, V]
        self.lengths = torch.zeros(rows, dtype=torch.long, device=dev)  # device mirror of KV lengths
        self.scratch_col = cache.max_len - 1
        self.key_pos = torch.arange(cache.max_len, device=dev)  # [L]
        # Static per-step inputs / outputs.
        self.step_in = torch.zeros(rows, 1 + self.n_vq + 1, device=dev)  # uniforms | step flag
        self.step_out = torch.zeros(rows, 1 + self.n_vq, dtype=torch.long, device=dev)  # continue | codes
        self.pass_frames = [n for n in CODEC_PASS_FRAMES if n <= codec_state.max_frames_per_pass]
        most = max(self.pass_frames)
        # codes of up to `most` frames [F, K] flattened | active flag
        self.codec_in = torch.zeros(rows, most * self.n_vq + 1, dtype=torch.long, device=dev)
        self.samples_per_frame = codec.config.downsample_rate
        self.pcm_out = torch.zeros(rows, 2, most * self.samples_per_frame, device=dev)
        pin = dev.type == "cuda"
        self.host_step_in = torch.zeros(rows, 1 + self.n_vq + 1, pin_memory=pin)
        self.host_codec_in = torch.zeros(MAX_PASSES_PER_COPY, rows, most * self.n_vq + 1, dtype=torch.long,
                                         pin_memory=pin)
        # Keep what the graphs read alive even if the model later replaces its own copies.
        self._rope = lm.rope.get(cache.max_len, dev)
        self._graphs: dict[tuple[str, int, int], torch.cuda.CUDAGraph] = {}  # (kind, bucket, frames)
        # Fused (compiled) LM step units; "off" (or a quantised LM) keeps the per-op step.
        mode = compile_mode(dev, compile)
        if mode != "off" and not fusable(lm):
            logger.info("LM has non-standard layers: fused step off")
            mode = "off"
        self.compile_mode = mode
        self.fused = FusedLM(lm, rows, cache.max_len, dev, mode) if mode != "off" else None
        self.use_graphs = bool(use_graphs) and dev.type == "cuda"
        if self.fused is not None:
            self._warm_fused()
        if self.use_graphs:
            self.capture()

    # ---- per-stream tables (outside the graphs) ----------------------------------------------

    @torch.inference_mode()
    def set_sampling(self, slot: int, params: SamplingParams) -> None:
        self.params[slot].copy_(torch.tensor(_param_row(params, self.vocab)))

    @torch.inference_mode()
    def reset_slot(self, slot: int, length: int) -> None:
        """A new prompt of `length` rows is in the slot: fresh repetition history."""
        self.seen[slot] = False
        self.lengths[slot] = length

    # ---- the captured bodies ------------------------------------------------------------------

    def _sampling(self, bucket: int, uniforms: torch.Tensor) -> SamplingBatch:
        p = self.params[:bucket]  # [B, 8], columns as in `_param_row`
        return SamplingBatch(
            do_sample=p[:, 0] > 0.5,
            audio=FilterParams(p[:, 1:2], p[:, 2:3].long(), p[:, 3:4], window=0, vocab=self.vocab),
            audio_repetition_penalty=p[:, 4],
            text=FilterParams(p[:, 5:6], p[:, 6:7].long(), p[:, 7:8], window=0, vocab=2),
            uniforms=uniforms,
            seen=self.seen[:bucket],
            # Fixed flags: both branches always run, so the kernels never depend on the rows' params.
            any_sample=True,
            all_sample=False,
            any_penalty=True,
        )

    def _lm_step(self, bucket: int) -> None:
        if self.fused is not None:
            self._lm_step_fused(bucket)
            return
        b = bucket
        step_in = self.step_in[:b]
        is_stepped = step_in[:, -1] > 0.5  # [B]: stepped and has room left in its KV cache
        sampling = self._sampling(b, step_in[:, :-1])
        hidden = self.hidden[:b]
        is_continue, codes = self.lm.generate_frame_static(hidden, sampling)  # [B], [B, K]
        go = is_stepped & is_continue
        # Repetition history: seen[b, k, codes[b, k]] |= go[b].
        index = codes[:, :, None]  # [B, K, 1]
        seen = self.seen[:b]
        seen.scatter_(2, index, seen.gather(2, index) | go[:, None, None])
        # Global decode: rows that go on write at their length, the others at the scratch column.
        lengths = self.lengths[:b]
        write_pos = torch.where(go, lengths, torch.full_like(lengths, self.scratch_col))
        visible = self.key_pos[None, :] <= lengths[:, None]  # [B, L]
        key_mask = torch.zeros(b, 1, 1, self.key_pos.shape[0], dtype=self.cache.dtype, device=self.device)
        key_mask.masked_fill_(~visible[:, None, None, :], float("-inf"))
        new_hidden = self.lm.decode_static(self.lm.frame_rows(codes), self.cache, lengths, write_pos, key_mask)
        hidden.copy_(torch.where(go[:, None], new_hidden, hidden))
        lengths.add_(go.long())
        out = self.step_out[:b]
        out[:, 0] = is_continue.long()
        out[:, 1:] = codes

    def _lm_step_fused(self, bucket: int) -> None:
        """`_lm_step` through the fused units (same inputs, outputs and state updates)."""
        b, fused = bucket, self.fused
        step_in = self.step_in[:b]
        params, uniforms = self.params[:b], step_in[:, :-1]
        hidden, seen, lengths = self.hidden[:b], self.seen[:b], self.lengths[:b]
        with attention_backends():
            is_continue, codes = fused.frame(hidden, params, uniforms, seen)  # [B], [B, K]
            go, write_pos, key_mask = fused.book(step_in[:, -1] > 0.5, is_continue, lengths, self.key_pos,
                                                 self.scratch_col, self.cache.dtype)
            index = codes[:, :, None]  # [B, K, 1]
            seen.scatter_(2, index, seen.gather(2, index) | go[:, None, None])
            new_hidden = fused.decode(codes, self.cache, lengths, write_pos, key_mask)
        hidden.copy_(torch.where(go[:, None], new_hidden, hidden))
        lengths.add_(go.long())
        out = self.step_out[:b]
        out[:, 0] = is_continue.long()
        out[:, 1:] = codes

    def _codec_step(self, bucket: int, frames: int) -> None:
        b, n = bucket, frames
        codec_in = self.codec_in[:b]
        codes = codec_in[:, : n * self.n_vq].view(b, n, self.n_vq).transpose(1, 2)  # [B, K, n]
        state = self.codec_state if b == self.codec_state.batch_size else self.codec_state.narrow(0, b)
        pcm = self.codec.decode_frames_static(codes, state, codec_in[:, -1] > 0)  # [B, 2, 3840 n]
        self.pcm_out[:b, :, : n * self.samples_per_frame].copy_(pcm)

    def _run(self, kind: str, bucket: int, frames: int = 0) -> None:
        graph = self._graphs.get((kind, bucket, frames))
        if graph is not None:
            graph.replay()
        elif kind == "lm":
            self._lm_step(bucket)
        else:
            self._codec_step(bucket, frames)

    @torch.inference_mode()
    def _warm_fused(self) -> None:
        """Compile the fused units for every bucket now (all rows masked: no state changes); if that
        fails, fall back to the per-op step rather than failing the engine."""
        self.step_in.zero_()
        try:
            for bucket in reversed(self.buckets):
                self._lm_step_fused(bucket)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Exception:  # a compiler problem must not take the engine down
            logger.exception("fused LM step (compile mode %s) failed: using the per-op step", self.compile_mode)
            self.fused = None
            self.compile_mode = "off"

    # ---- capture ------------------------------------------------------------------------------

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture the LM and codec steps of every bucket, largest first (they share one memory pool).

        Inputs are zero while capturing: every row is masked, so the warm-up runs change no state.
        """
        pool = torch.cuda.graph_pool_handle()
        with torch.cuda.device(self.device):
            stream = torch.cuda.Stream(self.device)
            self.step_in.zero_()
            self.codec_in.zero_()
            for bucket in reversed(self.buckets):
                bodies = [(("lm", bucket, 0), lambda b=bucket: self._lm_step(b))]
                bodies += [(("codec", bucket, n), lambda b=bucket, n=n: self._codec_step(b, n))
                           for n in self.pass_frames]
                for key, body in bodies:
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        for _ in range(2):  # lazy initialisation (library handles, workspaces) first
                            body()
                    torch.cuda.current_stream().wait_stream(stream)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                        body()
                    self._graphs[key] = graph
            torch.cuda.synchronize(self.device)
        self._local_cache = self.lm._local_cache  # read by the graphs: keep it alive
        logger.info("captured CUDA graphs for buckets %s on %s", self.buckets, self.device)

    # ---- per-step entry points (engine thread) ------------------------------------------------

    @torch.inference_mode()
    def step(self, bucket: int, rows: np.ndarray) -> np.ndarray:
        """One LM step; rows = `padded_step_input(...)` [bucket, 1 + K + 1].

        Returns int64 [bucket, 1 + K]: continue flag, then the frame's codes.
        """
        host = self.host_step_in[:bucket]
        host.copy_(torch.from_numpy(rows))
        self.step_in[:bucket].copy_(host, non_blocking=True)
        self._run("lm", bucket)
        return self.step_out[:bucket].cpu().numpy()

    @torch.inference_mode()
    def decode(self, bucket: int, slots: list[int], codes: np.ndarray) -> np.ndarray:
        """Decode codes [B, m, K] of `slots` (rows of this bucket) -> pcm [B, 2, 3840 m], in passes of
        `split_passes(m)` frames (one replay each; rows not in `slots` are masked)."""
        index = torch.as_tensor(slots, dtype=torch.long)
        device_index = index.to(self.device)
        codes_t = torch.from_numpy(np.ascontiguousarray(codes, dtype=np.int64))  # [B, m, K]
        passes = split_passes(codes_t.shape[1], self.pass_frames)
        pieces, start = [], 0
        for first in range(0, len(passes), MAX_PASSES_PER_COPY):
            group = passes[first : first + MAX_PASSES_PER_COPY]
            host = self.host_codec_in[: len(group), :bucket]
            host.zero_()
            offset = start
            for p, frames in enumerate(group):
                chunk = codes_t[:, offset : offset + frames].reshape(len(slots), -1)  # [B, n K]
                host[p, index, : chunk.shape[1]] = chunk
                offset += frames
            host[:, index, -1] = 1
            outputs = []
            for p, frames in enumerate(group):
                # Stream-ordered: this copy lands after the previous replay has read the buffer.
                self.codec_in[:bucket].copy_(host[p], non_blocking=True)
                self._run("codec", bucket, frames)
                pcm = self.pcm_out[:bucket, :, : frames * self.samples_per_frame]
                outputs.append(pcm.index_select(0, device_index))
            pieces.append(torch.cat(outputs, dim=-1).cpu())  # one sync per group of passes
            start = offset
        return torch.cat(pieces, dim=-1).numpy()
