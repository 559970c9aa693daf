"""Load a MOSS-TTS-Nano LM checkpoint (local directory or Hub id) into `MossTTSNanoLM`.

Accepts `pytorch_model.bin` (194 keys, tied aliases included) and safetensors exports that drop
the tied aliases. The model is built on the meta device and the checkpoint tensors are assigned
directly, so nothing is initialised twice. Every key and shape is checked; a mismatch raises
`ModelLoadError` listing what is missing, unexpected or of the wrong shape.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from ..errors import ModelLoadError
from .checkpoint import read_state_dict, resolve_checkpoint_dir
from .lm import MossTTSNanoLM
from .lm_config import LMConfig

logger = logging.getLogger(__name__)

# Training-time leftover the reference also ignores (its local transformer has no table).
IGNORED_KEYS = ("local_transformer.wte.weight",)
_MAX_LISTED = 12


def tied_pairs(config: LMConfig) -> dict[str, str]:
    """alias key -> source key for every tied head."""
    pairs = {"text_lm_head.weight": "transformer.wte.weight"}
    pairs.update({f"audio_lm_heads.{k}.weight": f"audio_embeddings.{k}.weight" for k in range(config.n_vq)})
    return pairs


def _fill_tied(state: dict[str, torch.Tensor], config: LMConfig) -> dict[str, torch.Tensor]:
    """Make both keys of every tied pair present (copying whichever one the checkpoint kept)."""
    state = dict(state)
    for alias, source in tied_pairs(config).items():
        if source not in state and alias in state:
            state[source] = state[alias]
        elif alias not in state and source in state:
            state[alias] = state[source]
        elif alias in state and source in state and state[alias] is not state[source]:
            a, s = state[alias], state[source]
            if a.shape == s.shape and not torch.equal(a, s):
                logger.warning(
                    "checkpoint holds different tensors for tied %s and %s; using %s", alias, source, source
                )
            state[alias] = s
    return state


def _describe(keys: list[str]) -> str:
    shown = ", ".join(keys[:_MAX_LISTED])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > _MAX_LISTED else "")


def check_state_dict(model: MossTTSNanoLM, state: dict[str, torch.Tensor]) -> None:
    """Raise ModelLoadError unless `state` has exactly the model's keys with the model's shapes."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict(keep_vars=True).items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = sorted(
        f"{name} (checkpoint {list(state[name].shape)}, model {list(shape)})"
        for name, shape in expected.items()
        if name in state and tuple(state[name].shape) != shape
    )
    if not (missing or unexpected or mismatched):
        return
    problems = []
    if missing:
        problems.append(f"missing keys: {_describe(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {_describe(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatches: {_describe(mismatched)}")
    raise ModelLoadError(
        "LM checkpoint does not match its config.json (" + "; ".join(problems) + "). "
        "Check that config.json and the weights come from the same MOSS-TTS-Nano checkpoint."
    )


def build_lm_on_meta(config: LMConfig) -> MossTTSNanoLM:
    """The model skeleton with meta tensors (no memory, no init) - for loading and shape checks."""
    with torch.device("meta"):
        return MossTTSNanoLM(config)


def load_lm(
    name_or_path: str | os.PathLike,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> MossTTSNanoLM:
    """Load the LM from a checkpoint directory (config.json + weights) or a Hub id; eval mode, no grads."""
    started = time.perf_counter()
    directory = resolve_checkpoint_dir(name_or_path, what="LM checkpoint")
    try:
        config = LMConfig.from_json(directory / "config.json")
    except ValueError as exc:
        raise ModelLoadError(f"invalid LM config {directory / 'config.json'}: {exc}") from exc
    state = read_state_dict(directory)
    for key in IGNORED_KEYS:
        state.pop(key, None)
    state = _fill_tied(state, config)

    model = build_lm_on_meta(config)
    check_state_dict(model, state)
    # Convert each distinct tensor once, keeping tied aliases pointing at the same result.
    converted: dict[int, torch.Tensor] = {}
    for name, tensor in state.items():
        key = id(tensor)
        if key not in converted:
            converted[key] = tensor.to(device=device, dtype=dtype)
        state[name] = converted[key]
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()  # assign=True replaced the shared Parameters one key at a time
    model.requires_grad_(False)
    model.eval()
    logger.info(
        "loaded LM %s (%d layers + %d local, hidden %d) on %s/%s in %.2f s",
        directory,
        config.num_layers,
        config.local_num_layers,
        config.hidden_size,
        device,
        dtype,
        time.perf_counter() - started,
    )
    return model
