"""Loads the parts of the synthesizer: resolve checkpoints, load both models, voices, engine(s).

Imports go one way: the synthesizer's `from_pretrained` calls `load_parts` and builds itself
from the `LoadedParts`; nothing here knows the synthesizer class.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import EngineConfig, LoadConfig
from .devices import available_cpus, configure_cpu_threads, resolve_device, resolve_lm_dtype
from .engine.engine import Engine
from .engine.idle import IdleSignal
from .engine.pool import EnginePool
from .engine.runner_types import build_runner
from .env import env_flag, env_str
from .errors import ModelLoadError, TTSError
from .model.checkpoint import resolve_checkpoint_dir
from .model.codec import MossAudioCodec
from .model.codec_loading import load_codec
from .model.lm_config import LMConfig
from .model.lm_loading import load_lm
from .model.quant import QUANT_MODES
from .precision import apply_precision
from .tokenizer import TextTokenizer
from .voices import VoiceBank, load_catalog

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedParts:
    """What the synthesizer is made of: the text tokenizer, the running engine (or one engine per
    device), the voice bank, a description for /health, the LM's config (special ids), and the
    load and engine configs as resolved here (defaults that follow the machine filled in)."""

    tokenizer: TextTokenizer
    engine: Engine | EnginePool
    voices: VoiceBank
    info: dict[str, Any]
    lm_config: LMConfig
    load: LoadConfig
    engine_config: EngineConfig


def default_cache_dir() -> Path:
    base = env_str("MOSS_TTS_CACHE_DIR") or os.path.join(
        env_str("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "moss_tts_studio"
    )
    return Path(base)


COMPILE_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def persist_compile_cache(cache_root: Path) -> Path:
    """Keep torch.compile's caches under the cache dir, so a restart compiles from the cache.

    Inductor reads TORCHINDUCTOR_CACHE_DIR each time it looks for a cache (torch 2.4 onwards, 2.11
    included): its FX-graph and AOTAutograd caches and the Triton kernels (a `triton/` folder inside,
    unless TRITON_CACHE_DIR says otherwise) all live there. Its default is under /tmp, which machines
    clear on reboot. A directory the user set is kept. Returns the directory in use.
    """
    chosen = env_str(COMPILE_CACHE_ENV) or str(cache_root / "torch-compile")
    os.environ[COMPILE_CACHE_ENV] = chosen
    return Path(chosen)


def checkpoint_fingerprint(directory: Path) -> str:
    """Identifies a checkpoint (config + weight file names and sizes) for cache keys."""
    digest = hashlib.sha256((directory / "config.json").read_bytes())
    for file in sorted(directory.iterdir()):
        if file.suffix in (".safetensors", ".bin"):
            digest.update(f"{file.name}:{file.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def _find_tokenizer(tokenizer: str | None, lm_dir: Path) -> Path:
    if tokenizer:
        path = Path(tokenizer).expanduser()
        if not path.is_file():
            raise ModelLoadError(f"tokenizer file {path} not found: pass the path of tokenizer.model")
        return path
    path = lm_dir / "tokenizer.model"
    if not path.is_file():
        raise ModelLoadError(
            f"no tokenizer.model in {lm_dir}: pass --tokenizer /path/to/tokenizer.model "
            "(the official checkpoint ships it next to config.json)"
        )
    return path


def resolve_devices(device: str, devices: str | Sequence[str] | None) -> list[torch.device]:
    """Engines' devices: `devices` ("cuda:0,cuda:1" or a list) if given; else every visible GPU
    when `device` is "auto" or "cuda" on a CUDA machine; else just `device`."""
    if devices:
        names = devices.split(",") if isinstance(devices, str) else list(devices)
        resolved = [resolve_device(str(name).strip()) for name in names if str(name).strip()]
        if not resolved:
            raise ValueError(f"devices {devices!r} names no device")
        if len(set(resolved)) != len(resolved):
            raise ValueError(f"devices {devices!r} lists a device twice")
        return resolved
    first = resolve_device(device)
    if first.type == "cuda" and (device or "auto").strip().lower() in ("auto", "cuda"):
        return [torch.device("cuda", index) for index in range(torch.cuda.device_count())]
    return [first]


def reference_encoder(codec: MossAudioCodec, device: torch.device) -> Callable[[np.ndarray], np.ndarray]:
    """The VoiceBank's encoder: float32 [2, n] at 48 kHz -> codes int64 [F, 16] by `codec` on `device`."""

    def encode(pcm: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            wav = torch.as_tensor(pcm, dtype=torch.float32, device=device)
            return codec.encode_clip(wav).cpu().numpy().astype(np.int64)

    return encode


def _resolve_default_voice(voices: VoiceBank) -> None:
    """Encode the default voice's clip (once per cache) in a thread, beside the rest of the load:
    the likeliest first request needs it, and the load's own work uses one core."""

    def resolve() -> None:
        try:
            voices.resolve(None)
        except TTSError as exc:  # the request for it reports the problem
            logger.info("default voice not prepared: %s", exc.message)

    threading.Thread(target=resolve, name="voice-default", daemon=True).start()


def load_parts(load: LoadConfig, engine_config: EngineConfig, report: Callable[[str], None]) -> LoadedParts:
    """Load what `load` names and start the engines (`engine_config`: their limits)."""
    engine_devices = resolve_devices(load.device, load.devices)
    torch_device = engine_devices[0]
    engine_config = engine_config.for_device(torch_device.type)
    lm_dtype = resolve_lm_dtype(load.dtype, torch_device)
    threads = configure_cpu_threads(torch_device, load.threads)
    if torch_device.type == "cuda":
        # Creating the CUDA context takes a second or more; do it while the weights are read from disk.
        threading.Thread(target=torch.empty, args=(1,), kwargs={"device": torch_device}, name="cuda-init",
                         daemon=True).start()
    allow_download = load.allow_download if load.allow_download is not None else not env_flag("HF_HUB_OFFLINE")
    cache_root = Path(load.cache_dir) if load.cache_dir is not None else default_cache_dir()

    report(f"locating LM checkpoint {load.lm}…")
    lm_dir = resolve_checkpoint_dir(load.lm, what="LM checkpoint")
    report(f"locating codec checkpoint {load.codec}…")
    codec_dir = resolve_checkpoint_dir(load.codec, what="codec checkpoint")
    tokenizer_path = _find_tokenizer(load.tokenizer, lm_dir)

    report(f"loading LM on {torch_device} ({str(lm_dtype).removeprefix('torch.')})…")
    lm_model = load_lm(lm_dir, device=torch_device, dtype=lm_dtype)
    report(f"loading codec on {torch_device} (float32)…")
    codec_model = load_codec(codec_dir, device=torch_device, dtype=torch.float32)
    text_tokenizer = TextTokenizer.from_file(tokenizer_path)
    # The encoder (fp32 in every precision mode; converting the decoder leaves it alone) is ready now.
    voices = VoiceBank(
        load_catalog(),
        voices_dir=Path(load.voices_dir) if load.voices_dir else None,
        cache_dir=cache_root / "voices",
        encoder=reference_encoder(codec_model, torch_device),
        codec_fingerprint=checkpoint_fingerprint(codec_dir),
        allow_download=allow_download,
    )

    pipelined = engine_config.pipeline_codec
    if pipelined is None:  # as the engine decides it (`engine/engine.py`)
        pipelined = torch_device.type == "cuda" or available_cpus() >= 2
    lm_model, codec_model, precision = apply_precision(lm_model, codec_model, load.quantize, torch_device,
                                                       pipelined=pipelined, cache_dir=cache_root, report=report)
    if torch_device.type == "cpu":
        # After the precision's measurement (whose CPU it must not share), beside the rest of the load.
        # CPU only: a GPU encodes a clip in milliseconds, and GPU work beside a CUDA graph capture
        # (--no-defer-compile captures during the load) would break the capture.
        _resolve_default_voice(voices)
    if any(d.type == "cuda" for d in engine_devices):
        logger.info("torch.compile cache: %s", persist_compile_cache(cache_root))
    engines, idle = [], IdleSignal()  # one signal: "no stream in progress" over every device
    for index, engine_device in enumerate(engine_devices):
        if index > 0:  # one engine per device, each with its own copy of both models
            report(f"loading LM and codec on {engine_device}…")
            lm_model = load_lm(lm_dir, device=engine_device, dtype=lm_dtype)
            codec_model = load_codec(codec_dir, device=engine_device, dtype=torch.float32)
        runner = build_runner(lm_model, codec_model, num_slots=engine_config.max_active_streams,
                              max_context_rows=engine_config.max_context_rows, device=engine_device,
                              enforce_eager=engine_config.enforce_eager, defer=engine_config.defer_compile,
                              # room for every preset's prefix (kept warm) plus recent cloned voices
                              prefix_cache_size=len(voices.list_presets()) + 8)
        engines.append(Engine(runner, engine_config, idle=idle))
    engine = engines[0] if len(engines) == 1 else EnginePool(engines)
    info = {
        "lm": load.lm,
        "codec": load.codec,
        "device": str(torch_device),
        "devices": [str(d) for d in engine_devices],
        "dtype": str(lm_dtype).removeprefix("torch."),
        "codec_dtype": "float32",
        "quantize": precision.mode if precision.mode in QUANT_MODES else None,
        "precision": precision.reason,
        "threads": threads,
    }
    resolved = load.with_options(cache_dir=str(cache_root), threads=threads, allow_download=allow_download)
    return LoadedParts(tokenizer=text_tokenizer, engine=engine, voices=voices, info=info,
                       lm_config=lm_model.config, load=resolved, engine_config=engine_config)
