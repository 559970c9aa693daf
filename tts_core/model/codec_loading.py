"""Checkpoint -> `MossAudioCodec`: key aliases, strict key/shape checks, weight-norm folding."""

from __future__ import annotations

import logging
import os
import re

import torch

from ..errors import ModelLoadError
from .checkpoint import read_state_dict, resolve_checkpoint_dir
from .codec import MossAudioCodec
from .codec_config import CodecConfig

logger = logging.getLogger(__name__)

# Older spellings the reference's load hooks accept (docs/spec/CODEC.md §2.2), mapped to the canonical names.
_ALIASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\.weight_g$"), ".parametrizations.weight.original0"),
    (re.compile(r"\.weight_v$"), ".parametrizations.weight.original1"),
    (re.compile(r"\.self_attn\.in_proj_weight$"), ".self_attn.in_proj.weight"),
    (re.compile(r"\.self_attn\.in_projs\.0\.weight$"), ".self_attn.in_proj.weight"),
    (re.compile(r"\.self_attn\.out_projs\.0\.weight$"), ".self_attn.out_proj.weight"),
    (re.compile(r"\.linear1\."), ".ffn.0."),
    (re.compile(r"\.linear2\."), ".ffn.2."),
)
_MAX_LISTED = 12


def canonicalize_codec_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename legacy keys to the canonical ones; two spellings of one tensor is an error."""
    out: dict[str, torch.Tensor] = {}
    sources: dict[str, str] = {}
    for key, tensor in state.items():
        name = key
        for pattern, replacement in _ALIASES:
            name = pattern.sub(replacement, name)
        if name in out:
            raise ModelLoadError(f"codec checkpoint holds {name!r} twice (as {sources[name]!r} and {key!r})")
        out[name], sources[name] = tensor, key
    return out


def check_codec_state_dict(model: MossAudioCodec, state: dict[str, torch.Tensor]) -> None:
    """Raise ModelLoadError listing every missing, unexpected and wrongly shaped key."""
    expected = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = sorted(
        f"{key}: checkpoint {list(state[key].shape)} vs model {list(expected[key])}"
        for key in set(expected) & set(state)
        if tuple(state[key].shape) != expected[key]
    )
    problems = []
    for label, items in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", mismatched)):
        if items:
            listed = ", ".join(items[:_MAX_LISTED]) + (
                f", ... (+{len(items) - _MAX_LISTED})" if len(items) > _MAX_LISTED else ""
            )
            problems.append(f"{len(items)} {label}: {listed}")
    if problems:
        raise ModelLoadError(
            "codec checkpoint does not match its config.json: "
            + "; ".join(problems)
            + ". Check that config.json and the weights come from the same MOSS-Audio-Tokenizer-Nano release."
        )


def load_codec(
    name_or_path: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> MossAudioCodec:
    """Load the codec from a local directory or a Hugging Face id; weights read as fp32 and checked
    strictly. `dtype` is the transformer stages' compute dtype (bf16/fp16 = CUDA autocast); weights
    and quantiser stay fp32 (docs/spec/CODEC.md §4.3)."""
    directory = resolve_checkpoint_dir(name_or_path, what="codec checkpoint")
    config = CodecConfig.from_json(directory / "config.json")
    state = canonicalize_codec_keys(read_state_dict(directory))
    for key, tensor in state.items():
        if not tensor.is_floating_point():
            raise ModelLoadError(f"codec weight {key} has dtype {tensor.dtype}; expected floating point")
    state = {key: tensor.to(torch.float32) for key, tensor in state.items()}
    with torch.device("meta"):
        model = MossAudioCodec(config)
    check_codec_state_dict(model, state)
    model.load_state_dict(state, strict=True, assign=True)
    model.fuse()  # weight norm folded once, in fp32 (see WeightNormConv1d)
    model = model.to(device).eval().requires_grad_(False)
    model.set_compute_dtype(dtype)
    logger.info(
        "codec loaded from %s: %.2f M parameters, device %s, compute %s",
        directory,
        sum(p.numel() for p in model.parameters()) / 1e6,
        device,
        dtype,
    )
    return model
