"""MOSS-TTS-Nano language model: global transformer over frame rows + local transformer per frame.

State-dict names and shapes are the reference's (docs/spec/LM.md §2.2), tied aliases included.
Per stream: `prefill(prompt_rows, cache, slot)` -> hidden [H]; then per frame, batched:
`generate_frame(hidden [B, H], sampling)` -> (is_continue [B], codes [B, n_vq]) and, for streams
that continue, `decode(codes, cache, slots)` -> hidden [B, H]; both run `lm_step.py`'s one step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import lm_step
from .kv_cache import DecodeAttender, KVCache, LocalKVCache, PrefillAttender, RowDecodeAttender
from .layers import DecoderStack, Embedding, RotaryTable, attention_backends
from .lm_config import LMConfig
from .sampling import SamplingBatch


class MossTTSNanoLM(nn.Module):
    """Inference-only MOSS-TTS-Nano LM (holds weights only; every cache is passed in explicitly)."""

    def __init__(self, config: LMConfig):
        super().__init__()
        c = config
        self.config = c
        self.transformer = DecoderStack(
            c.hidden_size, c.num_layers, c.num_heads, c.inner_size, c.layer_norm_eps, c.text_vocab_size
        )
        self.audio_embeddings = nn.ModuleList(
            Embedding(size, c.hidden_size) for size in c.audio_codebook_sizes
        )
        self.text_lm_head = nn.Linear(c.hidden_size, c.text_vocab_size, bias=False)
        self.audio_lm_heads = nn.ModuleList(
            nn.Linear(c.hidden_size, size, bias=False) for size in c.audio_codebook_sizes
        )
        self.local_transformer = DecoderStack(
            c.hidden_size, c.local_num_layers, c.num_heads, c.inner_size, c.layer_norm_eps, None
        )
        self.rope = RotaryTable(c.head_dim, c.rope_base)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Heads share their embedding tables (call again after replacing parameters)."""
        self.text_lm_head.weight = self.transformer.wte.weight
        for embedding, head in zip(self.audio_embeddings, self.audio_lm_heads):
            head.weight = embedding.weight

    @property
    def device(self) -> torch.device:
        return self.transformer.wte.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.transformer.wte.weight.dtype

    # ----------------------------------------------------------------------------------------------
    # Global transformer

    def check_row_ids(self, rows: torch.Tensor) -> None:
        """Raise ValueError if an audio id of rows [..., n_vq + 1] is outside its codebook and not the
        pad id (a device sync when rows live on a GPU; free on the host)."""
        c = self.config
        codes = rows[..., 1:]
        sizes = torch.tensor(c.audio_codebook_sizes, device=rows.device)
        bad = (codes != c.audio_pad_id) & ((codes < 0) | (codes >= sizes))
        if bool(bad.any()):
            raise ValueError(
                f"audio ids outside their codebook (and not the pad id {c.audio_pad_id}): "
                f"{codes[bad][:8].tolist()}"
            )

    def embed_rows(self, rows: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
        """Row embeddings [B, T, H] of rows [B, T, n_vq + 1]: e = W_te[x] + sum_k 1[c_k != pad] E_k[c_k],
        summed text first, then channels in order (the reference order); pads add exactly zero.
        `validate=False` skips the range check (a device sync) for rows built from sampled codes."""
        c = self.config
        if rows.ndim != 3 or rows.shape[-1] != c.row_width:
            raise ValueError(f"rows must have shape [B, T, {c.row_width}], got {list(rows.shape)}")
        codes = rows[..., 1:]  # [B, T, K]
        is_code = codes != c.audio_pad_id
        if validate:
            self.check_row_ids(rows)
        h = F.embedding(rows[..., 0], self.transformer.wte.weight)
        if validate and bool(is_code.all()):
            # No pads: multiplying by a mask of ones would be an exact no-op, so skip it. (Only
            # checked when validating anyway: the check is a device sync.)
            for k, table in enumerate(self.audio_embeddings):
                h = h + F.embedding(codes[..., k], table.weight)
            return h
        safe = codes.masked_fill(~is_code, 0)
        keep = is_code.to(h.dtype)
        for k, table in enumerate(self.audio_embeddings):
            h = h + F.embedding(safe[..., k], table.weight) * keep[..., k, None]
        return h

    def new_cache(
        self,
        num_slots: int,
        max_len: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> KVCache:
        c = self.config
        return KVCache(
            c.num_layers,
            num_slots,
            c.num_heads,
            max_len,
            c.head_dim,
            device=device if device is not None else self.device,
            dtype=dtype if dtype is not None else self.dtype,
        )

    @torch.no_grad()
    def new_local_cache(self, rows: int, device: torch.device | str | None = None) -> LocalKVCache:
        """Scratch state of the local transformer for frames of up to `rows` streams (see `lm_step`)."""
        c = self.config
        device = torch.device(device) if device is not None else self.device
        cos, sin = self.rope.get(c.local_max_len, device)
        local = LocalKVCache(c.local_num_layers, rows, c.num_heads, c.head_dim, cos[: c.local_max_len],
                             sin[: c.local_max_len], device, self.dtype)
        # Constants of every frame, made once: the continue token's embedding (local input at
        # position 1, contiguous like the later inputs) and the two text-head rows the stop decision reads.
        weight = self.transformer.wte.weight
        local.first_input = weight[c.audio_assistant_slot_id].expand(rows, -1).contiguous()  # [R, H]
        local.stop_weight = self.stop_weight()
        return local

    def stop_weight(self) -> torch.Tensor:
        """[2, H]: the text-head rows of (assistant slot = continue, audio end = stop). Row views
        stacked, so no index tensor is uploaded (graph-capturable)."""
        c, weight = self.config, self.transformer.wte.weight
        return torch.stack((weight[c.audio_assistant_slot_id], weight[c.audio_end_id]))

    @torch.no_grad()
    def prefill(
        self,
        rows: torch.Tensor,
        cache: KVCache,
        slot: int,
        *,
        reset: bool = True,
        return_all: bool = False,
        hidden_states_out: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run prompt rows [T, n_vq + 1] of one stream into cache slot `slot` (cleared first with
        `reset`, else appended after its rows). Returns the last row's post-ln_f hidden [H] ([T, H]
        with `return_all`); `hidden_states_out` receives each block's input and the ln_f output."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        if rows.ndim != 2:
            raise ValueError(
                f"prefill takes the rows of one stream [T, {self.config.row_width}], got {list(rows.shape)}"
            )
        if reset:
            cache.reset(slot)
        start, length = cache.length(slot), rows.shape[0]
        if length < 1:
            raise ValueError("prefill needs at least one row")
        cache.check_room([slot], length)
        x = self.embed_rows(rows.to(self.device)[None])  # [1, T, H]
        cos, sin = self.rope.span(start, length, self.device, x.dtype)  # [T, D/2]
        cos, sin = cos[None, :, None, None], sin[None, :, None, None]  # [1, T, 1, 1, D/2]
        collect: list[torch.Tensor] | None = [] if hidden_states_out is not None else None
        with attention_backends():
            h = self.transformer(x, cos, sin, PrefillAttender(cache, slot, start, length), collect)
        cache.advance([slot], length)
        if hidden_states_out is not None and collect is not None:
            hidden_states_out.extend(t[0] for t in collect)
        return h[0] if return_all else h[0, -1]

    @torch.no_grad()
    def prefill_many(self, rows: torch.Tensor, lengths: list[int], cache: KVCache, slots: list[int],
                     units: lm_step.StepUnits = lm_step.EAGER, start: int = 0) -> torch.Tensor:
        """Prefill P fresh slots in one pass: rows [P, T, n_vq + 1] right-padded, lengths [P] real
        rows each; slot i gets positions 0..lengths[i]-1. Returns each slot's last hidden [P, H].
        `units`: plain or compiled. `start` > 0: every slot already holds the same `start`-row
        prefix (e.g. from a `PrefixCache`) and `rows` follow it."""
        if rows.ndim != 3 or rows.shape[0] != len(slots) or len(lengths) != len(slots):
            raise ValueError(f"prefill_many takes rows [P, T, {self.config.row_width}] for P slots")
        total = rows.shape[1]
        if min(lengths) < 1 or max(lengths) > total:
            raise ValueError(f"lengths must be in [1, {total}], got {lengths}")
        cache.check_room(list(slots), 0)  # slot indices
        if start + total > cache.max_len:
            raise ValueError(f"{start} + {total} rows exceed max_len={cache.max_len}")
        # Checked where the rows are and copied without waiting: no device sync (the GPU may still be
        # running the last step while the next prompts are sent).
        self.check_row_ids(rows)
        x = self.embed_rows(rows.to(self.device, non_blocking=True), validate=False)  # [P, T, H]
        cos, sin = self.rope.span(0, start + total, self.device, x.dtype)  # [start + T, D/2]
        cos, sin = cos[None, :, None, None], sin[None, :, None, None]
        slot_index = torch.tensor(slots, dtype=torch.long).to(self.device, non_blocking=True)
        forward = units.prefill_after if start else units.prefill
        with attention_backends():
            h = forward(self.transformer, x, cos, sin, cache.k, cache.v, slot_index)
        for slot, length in zip(slots, lengths):
            cache.lengths[slot] = start + length
        last = torch.tensor(lengths, dtype=torch.long).to(self.device, non_blocking=True) - 1
        return h[torch.arange(len(slots), device=self.device), last]  # [P, H]

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, cache: KVCache, slots: torch.Tensor | list[int],
               units: lm_step.StepUnits = lm_step.EAGER) -> torch.Tensor:
        """Append one generated frame per stream: codes [B, n_vq] into `slots` [B], each at its slot's
        own length; attention reads exactly each slot's rows. Returns hidden [B, H]."""
        slot_list = [int(s) for s in (slots.tolist() if isinstance(slots, torch.Tensor) else slots)]
        if codes.ndim != 2 or codes.shape != (len(slot_list), self.config.n_vq):
            raise ValueError(f"decode takes codes [B, {self.config.n_vq}] for B slots, got {list(codes.shape)}")
        if len(set(slot_list)) != len(slot_list):
            raise ValueError(f"decode got a slot twice: {slot_list}")
        cache.check_room(slot_list, 1)
        positions = [cache.length(s) for s in slot_list]
        pos = torch.tensor(positions, dtype=torch.long, device=self.device)
        hidden = lm_step.global_step(self, codes.to(self.device, torch.long), pos,
                                     DecodeAttender(cache, slot_list, positions), max(positions) + 1, units)
        cache.advance(slot_list, 1)
        return hidden

    @torch.no_grad()
    def decode_rows(self, codes: torch.Tensor, cache: KVCache, slots: list[int],
                    units: lm_step.StepUnits = lm_step.ROWS) -> torch.Tensor:
        """`decode` with each row's attention alone over its own slot (`RowDecodeAttender`): with
        row-independent linears (`row_linear.py`) and `lm_step.ROWS`, a row's hidden state [H]
        is the same whatever other slots share the call."""
        if codes.ndim != 2 or codes.shape != (len(slots), self.config.n_vq) or len(set(slots)) != len(slots):
            raise ValueError(f"decode_rows takes codes [B, {self.config.n_vq}] for B distinct slots")
        cache.check_room(slots, 1)
        positions = [cache.length(s) for s in slots]
        pos = torch.tensor(positions, dtype=torch.long, device=self.device)
        hidden = lm_step.global_step(self, codes.to(self.device, torch.long), pos,
                                     RowDecodeAttender(cache, slots, positions), max(positions) + 1, units)
        cache.advance(slots, 1)
        return hidden

    # ----------------------------------------------------------------------------------------------
    # Local transformer and heads

    def text_logits(self, local_hidden: torch.Tensor) -> torch.Tensor:
        """Full text head [.., V_text] (tests / diagnostics; generation only needs the stop rows)."""
        return F.linear(local_hidden, self.transformer.wte.weight)

    def stop_logits(self, local_hidden: torch.Tensor) -> torch.Tensor:
        """[B, 2] logits of (assistant slot = continue, audio end = stop): two rows of the text head."""
        return F.linear(local_hidden, self.stop_weight())

    def frame_rows(self, codes: torch.Tensor) -> torch.Tensor:
        """Global rows [B, n_vq + 1] of generated frames codes [B, n_vq]: [assistant slot, c_0..]."""
        slot = torch.full(
            (codes.shape[0], 1), self.config.audio_assistant_slot_id, dtype=torch.long, device=codes.device
        )
        return torch.cat([slot, codes.to(torch.long)], dim=1)

    @torch.no_grad()
    def local_hidden_pos0(self, global_hidden: torch.Tensor) -> torch.Tensor:
        """Local transformer over the single position 0 (the global state) -> [B, H]."""
        local = self.new_local_cache(global_hidden.shape[0], global_hidden.device)
        keys, values = local.keys_values(global_hidden.shape[0])
        with attention_backends():
            return lm_step.local_position(self.local_transformer, global_hidden, local.index[0], local.cos[0],
                                          local.sin[0], keys, values, local.key_pos)

    @torch.no_grad()
    def generate_frame(self, hidden: torch.Tensor, sampling: SamplingBatch, *, local: LocalKVCache | None = None,
                       units: lm_step.StepUnits = lm_step.EAGER,
                       trace: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Decide continue/stop and draw the frame's codes for B streams (`lm_step.frame`); `local`
        is the caller's scratch state (default a fresh one). Returns is_continue [B] bool and codes
        [B, n_vq] long (meaningless for rows that stop)."""
        if local is None:
            local = self.new_local_cache(hidden.shape[0], hidden.device)
        return lm_step.frame(self, hidden, sampling, local, units, trace)

    @torch.no_grad()
    def local_teacher_forced(
        self, global_hidden: torch.Tensor, text_token: int, codes: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Uncached reference path: local inputs [g, W_te[t], E_0[c_0], ..., E_{K-2}[c_{K-2}]] at once.

        global_hidden [B, H], codes [B, K] -> (text logits [B, V_text], audio logits K x [B, V_k]).
        """
        c = self.config
        batch = global_hidden.shape[0]
        inputs = [global_hidden, self.transformer.wte.weight[text_token].expand(batch, -1)]
        inputs += [F.embedding(codes[:, k], self.audio_embeddings[k].weight) for k in range(c.n_vq - 1)]
        x = torch.stack(inputs, dim=1)  # [B, K + 1, H]
        cos, sin = self.rope.span(0, c.local_max_len, x.device, x.dtype)
        cos, sin = cos[None, :, None, None], sin[None, :, None, None]
        with attention_backends():
            out = self.local_transformer(x, cos, sin, _CausalAttender())
        audio = [self.audio_lm_heads[k](out[:, k + 1]) for k in range(c.n_vq)]
        return self.text_logits(out[:, 0]), audio


class _CausalAttender:
    """Plain causal attention with no cache (teacher-forced local pass)."""

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
