"""`make-tiny-checkpoint`: a small random LM + codec pair in the official layout, for offline runs.

Official config.json schema with small widths; random weights engineered so the LM keeps choosing
"continue", so the app plays audio for a length set by `max_frames`. The real tokenizer comes from
`--tokenizer` (a wrong path is an error, never replaced) or else the shared data
(`shared_data_dir`), whose preset clips are copied beside the models.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch

from .env import env_str
from .errors import ModelLoadError

logger = logging.getLogger(__name__)

_SPECIAL_IDS = {
    "pad_token_id": 3,
    "im_start_token_id": 4,
    "im_end_token_id": 5,
    "audio_start_token_id": 6,
    "audio_end_token_id": 7,
    "audio_user_slot_token_id": 8,
    "audio_assistant_slot_token_id": 9,
}


def lm_config_dict(*, hidden: int, layers: int, heads: int, inner: int) -> dict:
    """An LM config.json in the official schema (MossTTSNanoConfig with a nested GPT-2 config)."""
    return {
        "model_type": "moss_tts_nano",
        "architectures": ["MossTTSNanoForCausalLM"],
        "model_architecture": "global_local_transformer",
        "n_vq": 16,
        "audio_vocab_size": 1024,
        "audio_codebook_sizes": [1024] * 16,
        "audio_pad_token_id": 1024,
        **_SPECIAL_IDS,
        "local_transformer_layers": 1,
        "hidden_size": hidden,
        "vocab_size": 16384,
        "audio_tokenizer_type": "moss-audio-tokenizer-nano",
        "audio_tokenizer_sample_rate": 48000,
        "gpt2_config": {
            "model_type": "gpt2",
            "activation_function": "gelu_new",
            "n_embd": hidden,
            "n_layer": layers,
            "n_head": heads,
            "n_inner": inner,
            "n_positions": 32768,
            "layer_norm_epsilon": 1e-5,
            "position_embedding_type": "rope",
            "rope_base": 10000.0,
            "vocab_size": 16384,
            "pad_token_id": 3,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "tie_word_embeddings": True,
        },
    }


def _codec_transformer(in_dim: int, out_dim: int, context_s: float, *, d_model: int, layers: int) -> dict:
    return {
        "module_type": "Transformer", "causal": True, "conv_layout": True, "gating": "none",
        "norm": "layer_norm", "positional_embedding": "rope", "max_period": 10000, "layer_scale": 0.01,
        "d_model": d_model, "num_heads": max(1, d_model // 16), "num_layers": layers,
        "dim_feedforward": 4 * d_model, "input_dimension": in_dim, "output_dimension": out_dim,
        "context_duration": context_s,
    }


def codec_config_dict(*, d_model: int = 32, layers: int = 1) -> dict:
    """A codec config.json in the official schema: real patch sizes and stage widths, small
    transformers (the stage input/output dims are fixed by the patch arithmetic)."""

    def patch(size: int) -> dict:
        return {"module_type": "PatchedPretransform", "patch_size": size}

    t = _codec_transformer
    encoder = [patch(240), t(240, 384, 4.0, d_model=d_model, layers=layers), patch(2),
               t(768, 384, 6.0, d_model=d_model, layers=layers), patch(2),
               t(768, 384, 8.0, d_model=d_model, layers=layers), patch(2),
               t(768, 192, 10.0, d_model=d_model, layers=layers), patch(4)]
    decoder = [patch(4), t(192, 768, 10.0, d_model=d_model, layers=layers), patch(2),
               t(384, 768, 8.0, d_model=d_model, layers=layers), patch(2),
               t(384, 768, 6.0, d_model=d_model, layers=layers), patch(2),
               t(384, 240, 4.0, d_model=d_model, layers=layers), patch(240)]
    return {
        "model_type": "moss-audio-tokenizer",
        "architectures": ["MossAudioTokenizerModel"],
        "sampling_rate": 48000,
        "downsample_rate": 3840,
        "number_channels": 2,
        "enable_channel_interleave": True,
        "attention_implementation": "sdpa",
        "compute_dtype": "fp32",
        "code_dim": 768,
        "encoder_kwargs": encoder,
        "decoder_kwargs": decoder,
        "quantizer_type": "rlfq",
        "quantizer_kwargs": {"input_dim": 768, "rvq_dim": 512, "output_dim": 768, "num_quantizers": 16,
                             "codebook_size": 1024, "codebook_dim": 8},
    }


def engineer_never_stop(lm: torch.nn.Module) -> None:
    """Make the continue logit (id 9) beat the stop logit (id 7) by a wide margin: a large lane-0
    bias on the local final norm and a larger lane-0 embedding for 9 than 7 keep
    `LN(out0) · W_te[9] - LN(out0) · W_te[7]` positive."""
    with torch.no_grad():
        wte = lm.transformer.wte.weight
        ln_f = lm.local_transformer.ln_f
        ln_f.weight[0] = 0.1
        ln_f.bias[0] = 4.0
        wte[9] = wte[7]
        wte[9, 0] += 3.0


def quiet_output(codec: torch.nn.Module, rms: float = 0.05) -> None:
    """Scale the decoder's last projection so random weights give a comfortable level instead of
    full-scale noise (the player would otherwise clip)."""
    last = [m for m in codec.decoder if hasattr(m, "output_proj")][-1]
    with torch.no_grad():
        codes = torch.randint(0, 1024, (1, 16, 4), generator=torch.Generator().manual_seed(0))
        codec.fuse()
        level = codec.decode(codes).pow(2).mean().sqrt().item()
        if level > 0:
            last.output_proj.weight.mul_(rms / level)


def shared_data_dir() -> Path:
    """This project's shared data (real tokenizer, configs, preset clips): MOSS_TTS_PARITY_DIR, else
    `../shared/moss_tts_nano_data` beside the checkout."""
    return Path(env_str("MOSS_TTS_PARITY_DIR") or Path(__file__).resolve().parents[2] / "shared" / "moss_tts_nano_data")


def _find_tokenizer(tokenizer: str | os.PathLike | None) -> Path:
    """The tokenizer given (which must exist: a wrong path is never swapped for another file), else
    the shared data's."""
    if tokenizer:
        path = Path(tokenizer).expanduser()
        if not path.is_file():
            raise ModelLoadError(f"--tokenizer {tokenizer}: no such file; pass the path of the real "
                                 "tokenizer.model, or leave --tokenizer out to use the shared data's")
        return path
    shared = shared_data_dir() / "hf_checkpoint_meta" / "tokenizer.model"
    if shared.is_file():
        return shared
    raise ModelLoadError(
        "make-tiny-checkpoint needs the real tokenizer.model (the tiny LM keeps the real 16384-token "
        f"vocabulary), and the shared data has none at {shared.parent}: pass --tokenizer /path/to/tokenizer.model"
    )



def make_tiny_checkpoint(directory: Path, *, tokenizer: str | os.PathLike | None = None,
                         seed: int = 0) -> tuple[Path, Path]:
    """Write `directory/lm` and `directory/codec`; returns both paths."""
    from safetensors.torch import save_file

    from .model.codec import MossAudioCodec
    from .model.codec_config import CodecConfig
    from .model.lm import MossTTSNanoLM
    from .model.lm_config import LMConfig

    tokenizer_path = _find_tokenizer(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    lm_dir, codec_dir = directory / "lm", directory / "codec"
    lm_dir.mkdir(parents=True, exist_ok=True)
    codec_dir.mkdir(parents=True, exist_ok=True)

    lm_raw = lm_config_dict(hidden=64, layers=2, heads=4, inner=256)
    lm = MossTTSNanoLM(LMConfig.from_json(lm_raw))
    _randomize(lm, generator)
    engineer_never_stop(lm)
    (lm_dir / "config.json").write_text(json.dumps(lm_raw, indent=2))
    save_file(_unique_tensors(lm), str(lm_dir / "model.safetensors"))
    shutil.copyfile(tokenizer_path, lm_dir / "tokenizer.model")

    codec_raw = codec_config_dict()
    codec = MossAudioCodec(CodecConfig.from_json(codec_raw))
    _randomize(codec, generator)
    quiet_output(codec)
    (codec_dir / "config.json").write_text(json.dumps(codec_raw, indent=2))
    save_file(_unique_tensors(codec), str(codec_dir / "model.safetensors"))
    return lm_dir, codec_dir


def _randomize(module: torch.nn.Module, generator: torch.Generator) -> None:
    """Random weights with sane scales: N(0, 1/fan_in) matrices, N(0,1) embeddings, norms near 1."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if param.ndim >= 2 and "embed" not in name and "wte" not in name and "codebook" not in name:
                fan_in = max(1, param[0].numel())
                param.copy_(noise / fan_in**0.5)
            elif param.ndim >= 2:
                param.copy_(noise)
            elif name.endswith("bias"):
                param.copy_(0.02 * noise)
            else:
                param.copy_(1.0 + 0.05 * noise)


def _unique_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict without tied aliases (safetensors cannot store shared tensors; loaders re-tie)."""
    seen: set[int] = set()
    out = {}
    for name, tensor in module.state_dict().items():
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().contiguous().clone()
    return out


def build_random_models(lm_config: str, codec_config: str, device: torch.device, lm_dtype: torch.dtype):
    """(lm, codec) of the real sizes, random weights scaled like trained ones, LM engineered never to stop."""
    from .model.codec import MossAudioCodec
    from .model.codec_config import CodecConfig
    from .model.lm import MossTTSNanoLM
    from .model.lm_config import LMConfig

    generator = torch.Generator(device="cpu").manual_seed(0)
    lm = MossTTSNanoLM(LMConfig.from_json(lm_config))
    codec = MossAudioCodec(CodecConfig.from_json(codec_config))
    with torch.no_grad():
        for module in (lm, codec):
            for name, param in module.named_parameters():
                noise = torch.randn(param.shape, generator=generator)
                if param.ndim >= 2:
                    is_table = "wte" in name or "embeddings" in name or "codebook" in name
                    param.copy_(noise if is_table else noise / max(1, param[0].numel()) ** 0.5)
                elif name.endswith("bias"):
                    param.copy_(0.02 * noise)
                else:
                    param.copy_(1.0 + 0.05 * noise)
        lm.tie_weights()
        engineer_never_stop(lm)
    codec.fuse()
    lm = lm.to(device=device, dtype=lm_dtype).eval().requires_grad_(False)
    codec = codec.to(device).eval().requires_grad_(False)
    return lm, codec


def save_random_checkpoint(directory: Path, *, lm_config: str | Path, codec_config: str | Path,
                           tokenizer: str | Path) -> tuple[Path, Path]:
    """Write the full-size random models in the official layout: `directory/lm` (config.json,
    model.safetensors, tokenizer.model) and `directory/codec`; returns both directories. For
    measuring the app as users start it (load, warm-up, compile) without the real weights."""
    from safetensors.torch import save_file

    lm, codec = build_random_models(str(lm_config), str(codec_config), torch.device("cpu"), torch.float32)
    quiet_output(codec)  # random decoders are loud: keep what a listener hears at a sane level
    written = []
    for name, module, config in (("lm", lm, lm_config), ("codec", codec, codec_config)):
        folder = Path(directory) / name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(config, folder / "config.json")
        save_file(_unique_tensors(module), str(folder / "model.safetensors"))
        written.append(folder)
    shutil.copyfile(tokenizer, written[0] / "tokenizer.model")
    return written[0], written[1]
