"""Full-size models with random weights (from the real config.json files), and bench inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch


def build_random_models(lm_config: str, codec_config: str, device: torch.device, lm_dtype: torch.dtype):
    """(lm, codec) of the real sizes, random weights scaled like trained ones, LM engineered never to stop."""
    from ..model.codec import MossAudioCodec
    from ..model.codec_config import CodecConfig
    from ..model.lm import MossTTSNanoLM
    from ..model.lm_config import LMConfig
    from ..tiny import engineer_never_stop

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

    from ..tiny import _unique_tensors, quiet_output

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


def make_prompt(lm_config, rows: int, seed: int = 0) -> np.ndarray:
    """A voice-clone-shaped prompt of `rows` rows: 78 template rows, reference frames, text ids
    (for driving a `Runner` directly; the bench itself builds prompts through the Synthesizer)."""
    rng = np.random.default_rng(seed)
    ref_frames = max(1, (rows - 78) * 3 // 4)
    head = np.full((14, 17), 1024, np.int64)
    head[:, 0] = rng.integers(20, 16000, 14)
    head[-1, 0] = lm_config.audio_start_id
    ref = np.concatenate([np.full((ref_frames, 1), lm_config.audio_user_slot_id),
                          rng.integers(0, 1024, (ref_frames, 16))], axis=1)
    tail = np.full((rows - 14 - ref_frames, 17), 1024, np.int64)
    tail[:, 0] = rng.integers(20, 16000, len(tail))
    tail[0, 0] = lm_config.audio_end_id
    tail[-1, 0] = lm_config.audio_start_id
    return np.concatenate([head, ref, tail]).astype(np.int64)


def voice_codes(num_frames: int, seed: int) -> np.ndarray:
    """Reference-audio codes [num_frames, 16] of a made-up voice: a new seed is a new voice."""
    return np.random.default_rng(seed).integers(0, 1024, (num_frames, 16), dtype=np.int64)
