"""MOSS-Audio-Tokenizer-Nano: 48 kHz stereo <-> 16 x 1024 RVQ codes at 12.5 frames/s (docs/spec/CODEC.md).

Offline `encode`/`decode`, and a batched streaming decoder (`new_decode_state` + `decode_step`) whose
state is an explicit object with one row per stream. Stereo is interleaved into one 96 kHz stream
(L0 R0 L1 R1 ...) before patching and de-interleaved after unpatching (docs/spec/CODEC.md §3.1, §4.2).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

import torch
from torch import nn

from .codec_config import CodecConfig, PatchSpec, TransformerSpec
from .codec_layers import ProjectedTransformer, StageCache, patchify, unpatchify
from .codec_quantizer import ResidualLFQ

logger = logging.getLogger(__name__)

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Patch(nn.Module):
    """Parameter-free (un)patchify stage; only a placeholder so stage indices match the reference."""

    def __init__(self, patch_size: int):
        super().__init__()
        self.patch_size = patch_size


def _build_stages(stages: Sequence[PatchSpec | TransformerSpec]) -> nn.ModuleList:
    return nn.ModuleList(
        Patch(s.patch_size) if isinstance(s, PatchSpec) else ProjectedTransformer(s) for s in stages
    )


class CodecDecodeState:
    """Streaming-decoder state for `batch_size` independent stream rows: one `StageCache` per decoder
    transformer stage, of fixed size whatever the stream length (rings of window +
    max_frames_per_pass * tokens_per_frame - 1 tokens). Rows never read one another's entries."""

    def __init__(self, stages: list[StageCache], tokens_per_frame: list[int], max_frames_per_pass: int):
        self.stages = stages
        self.tokens_per_frame = tokens_per_frame
        self.max_frames_per_pass = max_frames_per_pass

    @property
    def batch_size(self) -> int:
        return self.stages[0].offsets.shape[0]

    @property
    def frames_decoded(self) -> torch.Tensor:
        """[B] code frames each row has decoded since its last reset."""
        return self.stages[0].offsets // self.tokens_per_frame[0]

    def narrow(self, low: int, high: int) -> CodecDecodeState:
        """Rows [low, high) as a view: decoding with it updates this state in place, copying nothing."""
        if not 0 <= low < high <= self.batch_size:
            raise ValueError(f"row range [{low}, {high}) is outside [0, {self.batch_size})")
        stages = [
            StageCache(
                keys=[k[low:high] for k in stage.keys],
                values=[v[low:high] for v in stage.values],
                positions=stage.positions[low:high],
                offsets=stage.offsets[low:high],
                window=stage.window,
            )
            for stage in self.stages
        ]
        return CodecDecodeState(stages, self.tokens_per_frame, self.max_frames_per_pass)

    def reset_row(self, row: int) -> None:
        """Forget one row, as `reset([row])` does, with slice fills only (no device sync)."""
        if not 0 <= row < self.batch_size:
            raise IndexError(f"row {row} is outside [0, {self.batch_size})")
        for stage in self.stages:
            stage.positions[row].fill_(-1)
            stage.offsets[row].fill_(0)
            for tensor in (*stage.keys, *stage.values):
                tensor[row].zero_()

    def reset_rows(self, rows: torch.Tensor) -> None:
        """Forget the rows listed in `rows` (long, on the state's device), as `reset` does, with
        index fills (no device sync, a few kernels whatever the number of rows)."""
        for stage in self.stages:
            stage.positions.index_fill_(0, rows, -1)
            stage.offsets.index_fill_(0, rows, 0)
            for tensor in (*stage.keys, *stage.values):
                tensor.index_fill_(0, rows, 0)

    def reset(self, rows: torch.Tensor | Sequence[int] | None = None) -> None:
        """Forget all rows (None), the rows of a bool mask [B], or the listed row indices."""
        mask = _row_mask(rows, self.batch_size, self.stages[0].offsets.device)
        for stage in self.stages:
            stage.reset(mask)


def _row_mask(rows: torch.Tensor | Sequence[int] | None, batch: int, device: torch.device) -> torch.Tensor:
    if rows is None:
        return torch.ones(batch, dtype=torch.bool, device=device)
    rows = torch.as_tensor(rows, device=device)
    if rows.dtype == torch.bool:
        if rows.shape != (batch,):
            raise ValueError(f"row mask must have shape [{batch}], got {list(rows.shape)}")
        return rows
    if rows.numel() and (rows.min() < 0 or rows.max() >= batch):
        raise ValueError(f"row indices must be in [0, {batch}), got {rows.tolist()}")
    mask = torch.zeros(batch, dtype=torch.bool, device=device)
    mask[rows.long()] = True
    return mask


class MossAudioCodec(nn.Module):
    """The codec with the reference state_dict layout: `encoder.{0..8}`, `quantizer`, `decoder.{0..8}`,
    built from `config` (`CodecConfig.from_json`). Keep the parameters fp32: reduced precision is
    chosen with `set_compute_dtype`, which autocasts the transformer stages, never the quantiser."""

    def __init__(self, config: CodecConfig):
        super().__init__()
        self.config = config
        self.encoder = _build_stages(config.encoder)
        self.quantizer = ResidualLFQ(config.quantizer)
        self.decoder = _build_stages(config.decoder)
        # fp32 is the reference; bf16/fp16 run the transformer stages under CUDA autocast while the
        # quantiser stays fp32 (docs/spec/CODEC.md §4.3). Weights stay fp32 either way.
        self.compute_dtype = torch.float32

    # ------------------------------------------------------------------ setup
    def set_compute_dtype(self, dtype: torch.dtype | str) -> None:
        dtype = _DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype
        if dtype not in _DTYPES.values():
            raise ValueError(f"compute dtype must be float32, bfloat16 or float16, got {dtype}")
        self.compute_dtype = dtype

    def fuse(self) -> None:
        """Fold the quantiser's weight norm into plain weights once (call after loading weights)."""
        self.quantizer.fuse()

    def _autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.compute_dtype)

    @property
    def device(self) -> torch.device:
        return self.quantizer.quantizers[0].codebook.weight.device

    # ------------------------------------------------------------------ encode
    @torch.inference_mode()
    def encode_latents(
        self, wav: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """wav [B, 2, T] at 48 kHz -> (encoder output [B, 768, ceil(T/3840)] fp32, valid frames [B])."""
        wav, lengths = self._check_wav(wav, lengths)
        if wav.shape[-1] == 0:
            raise ValueError("wav has no samples")
        return self.encode_pass(wav, lengths)

    def encode_pass(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`encode_latents` without its checks (host syncs): wav [B, 2, T] fp32 on the codec's device,
        lengths [B] long (the ONNX export wraps it)."""
        batch, _, length = wav.shape
        hop = self.config.downsample_rate
        padded = -(-length // hop) * hop
        keep = torch.arange(padded, device=wav.device)[None, None] < lengths[:, None, None]  # [B, 1, T']
        wav = torch.where(keep, torch.nn.functional.pad(wav, (0, padded - length)), 0.0)  # zeros past ends
        h = wav.transpose(1, 2).reshape(batch, 2 * padded, 1)  # [B, 2T', 1] interleaved L R L R
        valid = 2 * lengths
        with self._autocast(wav.device):
            for stage in self.encoder:
                if isinstance(stage, Patch):
                    h, valid = patchify(h, stage.patch_size), valid // stage.patch_size
                else:
                    h = stage(h, valid)
        return h.float().transpose(1, 2), valid  # [B, 768, F']

    @torch.inference_mode()
    def encode(
        self, wav: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """wav [B, 2, T] float at 48 kHz (lengths [B], default T) -> (codes [B, 16, F], code_lengths [B]).
        code_lengths = floor(length / 3840) (a trailing partial frame is dropped); columns past a row's
        code length are padding."""
        latents, frames = self.encode_latents(wav, lengths)
        codes = self.quantizer.encode(latents, frames)  # [B, 16, F']
        return codes[:, :, : int(frames.max()) if frames.numel() else 0], frames

    def encode_clip(self, wav: torch.Tensor) -> torch.Tensor:
        """One reference clip [2, T] at 48 kHz -> codes [F, 16] (the TTS prompt layout)."""
        if wav.dim() != 2:
            raise ValueError(f"encode_clip expects [2, T], got {list(wav.shape)}")
        codes, frames = self.encode(wav[None])
        return codes[0, :, : int(frames[0])].t().contiguous()

    def _check_wav(
        self, wav: torch.Tensor, lengths: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if wav.dim() != 3 or wav.shape[1] != self.config.num_channels:
            raise ValueError(f"wav must be [B, {self.config.num_channels}, T], got {list(wav.shape)}")
        wav = wav.to(device=self.device, dtype=torch.float32)
        batch, _, length = wav.shape
        if lengths is None:
            return wav, torch.full((batch,), length, dtype=torch.long, device=wav.device)
        lengths = torch.as_tensor(lengths, device=wav.device).long()
        if lengths.shape != (batch,) or bool((lengths < 0).any()) or bool((lengths > length).any()):
            raise ValueError(f"lengths must be [B] values in [0, {length}], got {lengths.tolist()}")
        return wav, lengths

    # ------------------------------------------------------------------ decode
    def quantizer_decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, nq, F] -> dequantised latent [B, 768, F] fp32 (docs/spec/CODEC.md §4.1)."""
        with torch.inference_mode():
            return self.quantizer.decode(self._check_codes(codes))

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Offline decode: codes [B, 16, F] -> waveform [B, 2, 3840 F] fp32 at 48 kHz."""
        latent = self.quantizer.decode(self._check_codes(codes))
        h = latent.transpose(1, 2)  # [B, F, 768]
        with self._autocast(h.device):
            for stage in self.decoder:
                if isinstance(stage, Patch):
                    h = unpatchify(h, stage.patch_size)
                else:
                    h = stage(h)
        return self._deinterleave(h)

    def new_decode_state(
        self, batch_size: int, device: torch.device | str | None = None, *, max_frames_per_pass: int = 4
    ) -> CodecDecodeState:
        """Fresh streaming state for `batch_size` rows. `decode_step` splits longer calls into passes of at
        most `max_frames_per_pass` frames; the rings are sized for that pass length."""
        if batch_size < 1 or max_frames_per_pass < 1:
            raise ValueError("batch_size and max_frames_per_pass must be >= 1")
        device = torch.device(device) if device is not None else self.device
        dtype = self.compute_dtype if device.type == "cuda" else torch.float32
        tokens = self.config.decoder_tokens_per_frame()
        stages = [s for s in self.decoder if isinstance(s, ProjectedTransformer)]
        caches = [
            StageCache.empty(
                stage.spec,
                batch_size,
                stage.spec.context_tokens + max_frames_per_pass * tpf - 1,
                device,
                dtype,
            )
            for stage, tpf in zip(stages, tokens)
        ]
        return CodecDecodeState(caches, tokens, max_frames_per_pass)

    @torch.inference_mode()
    def decode_step(
        self, codes: torch.Tensor, state: CodecDecodeState, active: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Decode n >= 1 new frames per row: codes [B, 16, n] -> exactly the new audio [B, 2, 3840 n].
        Each row continues from its own position; rows with active[b] False keep their state and get
        zeros."""
        if codes.dim() != 3 or codes.shape[0] != state.batch_size:
            raise ValueError(
                f"codes must be [{state.batch_size}, 16, n] for this decode state, got {list(codes.shape)}"
            )
        if active is not None:
            active = torch.as_tensor(active, dtype=torch.bool, device=codes.device)
            if active.shape != (state.batch_size,):
                raise ValueError(f"active must be a bool mask [{state.batch_size}], got {list(active.shape)}")
            if bool(active.all()):
                active = None
            elif not bool(active.any()):
                return torch.zeros(
                    codes.shape[0], 2, codes.shape[-1] * self.config.downsample_rate, device=self.device
                )
            else:  # idle rows may hold anything (e.g. the pad id 1024): their output is discarded
                codes = torch.where(active[:, None, None], codes, torch.zeros_like(codes))
        codes = self._check_codes(codes)
        active = None if active is None else active.to(codes.device)
        trim = codes.device.type == "cpu"  # host reads are free there; CUDA keeps fixed shapes
        pieces = []
        for start in range(0, codes.shape[-1], state.max_frames_per_pass):
            pieces.append(self.decode_pass(codes[:, :, start : start + state.max_frames_per_pass], state, active,
                                           trim))
        audio = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=-1)
        if active is not None:
            audio = torch.where(active[:, None, None], audio, torch.zeros((), device=audio.device))
        return audio

    def decode_pass(self, codes: torch.Tensor, state: CodecDecodeState, active: torch.Tensor | None,
                    trim: bool) -> torch.Tensor:
        """One streaming pass of `decode_step`, no checks: codes [B, 16, n] long, n <= the state's
        max_frames_per_pass -> [B, 2, 3840 n]; updates `state` in place (the ONNX export wraps it)."""
        h = self.quantizer.decode(codes).transpose(1, 2)  # [B, n, 768]
        caches = iter(state.stages)
        with self._autocast(h.device):
            for stage in self.decoder:
                if isinstance(stage, Patch):
                    h = unpatchify(h, stage.patch_size)
                else:
                    h = stage.step(h, next(caches), active, trim=trim)
        return self._deinterleave(h)

    @torch.inference_mode()
    def decode_frames_static(
        self, codes: torch.Tensor, state: CodecDecodeState, active: torch.Tensor, attention: str = "sdpa"
    ) -> torch.Tensor:
        """One `decode_step` pass with no host syncs or checks (CUDA-graph capture): valid codes
        [B, 16, n <= state.max_frames_per_pass], active [B] bool, on the device -> [B, 2, 3840 n];
        inactive rows keep their state and get zeros. `attention`: one of `ATTENTION_MODES`."""
        codes = torch.where(active[:, None, None], codes, torch.zeros_like(codes))
        h = self.quantizer.decode(codes).transpose(1, 2)  # [B, n, 768]
        caches = iter(state.stages)
        # Autocast's weight-cast cache must be off while capturing (the casts belong in the graph).
        context = (contextlib.nullcontext() if self.compute_dtype == torch.float32 else
                   torch.autocast(device_type=h.device.type, dtype=self.compute_dtype, cache_enabled=False))
        with context:
            for stage in self.decoder:
                if isinstance(stage, Patch):
                    h = unpatchify(h, stage.patch_size)
                else:
                    h = stage.step(h, next(caches), active, attention=attention)
        audio = self._deinterleave(h)  # [B, 2, 3840 n]
        return torch.where(active[:, None, None], audio, torch.zeros((), device=audio.device))

    def _deinterleave(self, h: torch.Tensor) -> torch.Tensor:
        batch = h.shape[0]
        return h.float().reshape(batch, -1, 2).transpose(1, 2).contiguous()  # [B, 2, S]: even L, odd R

    def _check_codes(self, codes: torch.Tensor) -> torch.Tensor:
        spec = self.config.quantizer
        if codes.dim() != 3 or not 1 <= codes.shape[1] <= spec.num_quantizers or codes.shape[2] < 1:
            raise ValueError(
                f"codes must be [B, nq <= {spec.num_quantizers}, F >= 1], got {list(codes.shape)}"
            )
        if codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise ValueError(f"codes must be integers, got {codes.dtype}")
        codes = codes.to(device=self.device, dtype=torch.long)
        # Range check costs a device sync, so it is skipped on CUDA (out-of-range ids assert there).
        if codes.device.type == "cpu" and (int(codes.min()) < 0 or int(codes.max()) >= spec.codebook_size):
            raise ValueError(
                f"codes must be in [0, {spec.codebook_size}), got [{int(codes.min())}, {int(codes.max())}]"
            )
        return codes
