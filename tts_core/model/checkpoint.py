"""Locating and reading checkpoints: a local directory or a Hugging Face Hub id.

Shared by the LM and codec loaders. Weights are read as plain tensors (safetensors, or
`pytorch_model.bin` with `weights_only=True, mmap=True`); nothing from the checkpoint repo is
executed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from ..env import env_flag, env_str
from ..errors import ModelLoadError

logger = logging.getLogger(__name__)

WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "*.json", "*.model")


def resolve_checkpoint_dir(name_or_path: str | os.PathLike, *, what: str = "checkpoint") -> Path:
    """Return a local directory holding `config.json` and weights: an existing path as is, anything
    else as a Hub id fetched into the standard HF cache (honours HF_HOME, HF_HUB_OFFLINE). Failures
    raise `ModelLoadError` with one clause for people (the Hub's own exception goes to the log)."""
    path = Path(os.fspath(name_or_path)).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{what} directory {path} has no config.json: point to the folder that holds it")
        return path
    name = os.fspath(name_or_path)
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ModelLoadError(
            f"{what} {name!r} is neither an existing directory nor a Hugging Face id like 'owner/name'"
        )
    try:
        from huggingface_hub import snapshot_download

        logger.info("fetching %s %s from the Hugging Face Hub (cache: %s)", what, name, _hf_cache_hint())
        local = snapshot_download(repo_id=name, allow_patterns=list(WEIGHT_PATTERNS))
    except Exception as exc:  # network, auth, offline mode: all become one short message
        logger.warning("could not get %s %s from the Hugging Face Hub (cache: %s): %s: %s", what, name,
                       _hf_cache_hint(), type(exc).__name__, exc)
        try:
            offline = env_flag("HF_HUB_OFFLINE")
        except ValueError:  # a malformed value must not hide the load error itself
            offline = False
        why = ("HF_HUB_OFFLINE=1 is set and it is not in the Hugging Face cache" if offline
               else "no network, or not in the Hugging Face cache")
        raise ModelLoadError(f"the {what} {name} could not be downloaded from Hugging Face ({why})") from exc
    return Path(local)


def _hf_cache_hint() -> str:
    home = env_str("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return env_str("HF_HUB_CACHE") or os.path.join(home, "hub")


def read_state_dict(directory: Path) -> dict[str, torch.Tensor]:
    """Read every weight tensor of a checkpoint directory onto the CPU (safetensors preferred)."""
    safetensor_files = sorted(directory.glob("*.safetensors"))
    if safetensor_files:
        from safetensors.torch import load_file

        state: dict[str, torch.Tensor] = {}
        for file in safetensor_files:
            state.update(load_file(str(file), device="cpu"))
        return state
    bin_files = sorted(directory.glob("pytorch_model*.bin"))
    if bin_files:
        state = {}
        for file in bin_files:
            loaded = torch.load(str(file), map_location="cpu", weights_only=True, mmap=True)
            if not isinstance(loaded, dict):
                raise ModelLoadError(f"{file} does not hold a state dict")
            state.update(loaded)
        return state
    raise ModelLoadError(
        f"no weights in {directory}: expected *.safetensors or pytorch_model.bin next to config.json"
    )
