"""Loads the parts of the synthesizer: resolve checkpoints, load both models, voices, engine(s).

Imports go one way: the synthesizer's `from_pretrained` calls `load_parts` and builds itself
from the `LoadedParts`; nothing here knows the synthesizer class.
"""

from __future__ import annotations

import copy
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

from . import cpu_mode_cache
from .config import EngineConfig
from .cpu_mode import FRAME_S, REALTIME_RTF, ModeChoice, measure_frame_s, realtime_reason
from .cpu_mode_settle import PROVISIONAL, PendingMode
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
from .model.quant import QUANT_MODES, quantize_codec, quantize_lm
from .tokenizer import TextTokenizer
from .voices import VoiceBank, load_catalog

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedParts:
    """What the synthesizer is made of: the text tokenizer, the running engine (or one engine per
    device), the voice bank, a description for /health, the LM's config (special ids), and the CPU
    precision still to settle after start (`cpu_mode_settle.py`), if any."""

    tokenizer: TextTokenizer
    engine: Engine | EnginePool
    voices: VoiceBank
    info: dict[str, Any]
    lm_config: LMConfig
    pending_mode: PendingMode | None = None


@dataclass(frozen=True, slots=True)
class Precision:
    """The models in the precision they serve in, why, and what is left to settle after start."""

    lm: Any
    codec: Any
    choice: ModeChoice
    pending: PendingMode | None = None


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


def _apply_precision(lm_model, codec_model, quantize: str | None, device: torch.device,
                     engine_config: EngineConfig, report: Callable[[str], None],
                     load_fp32: Callable[[], tuple[Any, Any]] | None = None,
                     measure: Callable[..., float] = measure_frame_s,
                     measured: Callable[[], None] = lambda: None) -> Precision:
    """CPU weight precision: None/"fp32" keeps fp32, "fp16"/"int8" forces a mode, "auto" applies the
    choice an earlier start kept, else measures fp32 and, when it is too slow, serves int8 at once
    with fp16 left to settle after start (`cpu_mode_settle.py`; `load_fp32` reads fresh fp32 models
    for that). `measured` runs once no measurement is left to take before serving (other work may
    then share the CPU); `measure` is for tests."""
    mode = (quantize or "fp32").strip().lower()
    if mode not in ("auto", "fp32", *QUANT_MODES):
        raise ModelLoadError(f"unknown precision {quantize!r}; use auto, fp32, {', '.join(QUANT_MODES)}")
    if mode != "auto" or device.type != "cpu":
        measured()
    if device.type != "cpu":
        if mode in QUANT_MODES:
            raise ModelLoadError(f"{mode} weights are a CPU mode; drop --quantize on CUDA (the LM runs in bf16 there)")
        return Precision(lm_model, codec_model, ModeChoice("fp32", reason=f"{device.type}: LM {lm_model.dtype}, "
                                                                           f"codec fp32"))
    if mode == "auto":
        return _auto_precision(lm_model, codec_model, engine_config, report, load_fp32, measure, measured)
    if mode in QUANT_MODES:
        report(f"converting linear layers to {mode} weights…")
        quantize_lm(lm_model, mode)
        quantize_codec(codec_model, mode)
    return Precision(lm_model, codec_model, ModeChoice(mode, reason=f"{mode} (forced)" if mode != "fp32" else "fp32"))


def _auto_precision(lm_model, codec_model, engine_config: EngineConfig, report: Callable[[str], None],
                    load_fp32: Callable[[], tuple[Any, Any]] | None, measure: Callable[..., float],
                    measured: Callable[[], None]) -> Precision:
    pipelined = engine_config.pipeline_codec
    if pipelined is None:
        pipelined = available_cpus() >= 2
    key = cpu_mode_cache.choice_key(lm_model.config, pipelined=pipelined)
    known = cpu_mode_cache.load_choice(default_cache_dir(), key)
    if known is not None:
        measured()
    if known is not None and not known.settled and "fp32" in known.rtf:
        report(f"fp32 was too slow here at an earlier start: serving {PROVISIONAL} now, fp16 is measured when idle…")
        return _provisional(lm_model, codec_model, load_fp32, known.rtf["fp32"], pipelined, key)
    if known is not None:
        report(f"CPU mode {known.mode}, as measured at an earlier start on this machine")
        if known.mode in QUANT_MODES:
            quantize_lm(lm_model, known.mode)
            quantize_codec(codec_model, known.mode)
        return Precision(lm_model, codec_model,
                         ModeChoice(known.mode, known.rtf, f"{known.reason} (measured at an earlier start)"))
    report("measuring CPU speed in fp32…")
    fp32_rtf = measure(lm_model, codec_model, pipelined=pipelined) / FRAME_S
    measured()
    logger.info("CPU mode fp32: RTF %.2f", fp32_rtf)
    if fp32_rtf <= REALTIME_RTF:
        choice = ModeChoice("fp32", {"fp32": fp32_rtf}, realtime_reason("fp32", fp32_rtf))
        cpu_mode_cache.store_choice(default_cache_dir(), key, choice)
        return Precision(lm_model, codec_model, choice)
    report(f"fp32 is too slow here (RTF {fp32_rtf:.2f}): serving {PROVISIONAL} now, fp16 is measured when idle…")
    return _provisional(lm_model, codec_model, load_fp32, fp32_rtf, pipelined, key)


def _provisional(lm_model, codec_model, load_fp32: Callable[[], tuple[Any, Any]] | None, fp32_rtf: float,
                 pipelined: bool, key: str) -> Precision:
    """Serve `PROVISIONAL` now; the rest is measured after start. The unsettled choice is kept, so a
    server stopped before it settles starts this way again without measuring fp32."""
    if load_fp32 is None:  # (callers holding no checkpoint) keep fp32 copies: the originals are quantised now
        copies = copy.deepcopy(lm_model), copy.deepcopy(codec_model)
        load_fp32 = lambda: copies  # noqa: E731
    pending = PendingMode(load_fp32, fp32_rtf, pipelined, default_cache_dir(), key)
    cpu_mode_cache.store_choice(default_cache_dir(), key, pending.provisional_choice())
    quantize_lm(lm_model, PROVISIONAL)
    quantize_codec(codec_model, PROVISIONAL)
    return Precision(lm_model, codec_model, pending.provisional_choice(), pending)


def _resolve_default_voice(voices: VoiceBank) -> None:
    """Encode the default voice's clip (once per cache) in a thread, beside the rest of the load:
    the likeliest first request needs it, and the load's own work uses one core."""

    def resolve() -> None:
        try:
            voices.resolve(None)
        except TTSError as exc:  # the request for it reports the problem
            logger.info("default voice not prepared: %s", exc.message)

    threading.Thread(target=resolve, name="voice-default", daemon=True).start()


def load_parts(*, lm: str, codec: str, device: str, dtype: str, tokenizer: str | None,
               voices_dir: str | Path | None, engine_config: EngineConfig, cache_dir: str | Path | None,
               allow_download: bool | None, report: Callable[[str], None], quantize: str | None = None,
               devices: str | Sequence[str] | None = None) -> LoadedParts:
    """Load the parts (arguments as documented by `from_pretrained`); the engines are started."""
    engine_devices = resolve_devices(device, devices)
    torch_device = engine_devices[0]
    lm_dtype = resolve_lm_dtype(dtype, torch_device)
    configure_cpu_threads(torch_device)
    if torch_device.type == "cuda":
        # Creating the CUDA context takes a second or more; do it while the weights are read from disk.
        threading.Thread(target=torch.empty, args=(1,), kwargs={"device": torch_device}, name="cuda-init",
                         daemon=True).start()
    if allow_download is None:
        allow_download = not env_flag("HF_HUB_OFFLINE")

    report(f"locating LM checkpoint {lm}…")
    lm_dir = resolve_checkpoint_dir(lm, what="LM checkpoint")
    report(f"locating codec checkpoint {codec}…")
    codec_dir = resolve_checkpoint_dir(codec, what="codec checkpoint")
    tokenizer_path = _find_tokenizer(tokenizer, lm_dir)

    report(f"loading LM on {torch_device} ({str(lm_dtype).removeprefix('torch.')})…")
    lm_model = load_lm(lm_dir, device=torch_device, dtype=lm_dtype)
    report(f"loading codec on {torch_device} (float32)…")
    codec_model = load_codec(codec_dir, device=torch_device, dtype=torch.float32)
    text_tokenizer = TextTokenizer.from_file(tokenizer_path)
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    # The encoder (fp32 in every precision mode; converting the decoder leaves it alone) is ready now.
    voices = VoiceBank(
        load_catalog(),
        voices_dir=Path(voices_dir) if voices_dir else None,
        cache_dir=cache_root / "voices",
        encoder=reference_encoder(codec_model, torch_device),
        codec_fingerprint=checkpoint_fingerprint(codec_dir),
        allow_download=allow_download,
    )

    def measured() -> None:
        # CPU only: a GPU encodes a clip in milliseconds, and GPU work beside a CUDA graph capture
        # (--no-defer-compile captures during the load) would break the capture.
        if torch_device.type == "cpu":
            _resolve_default_voice(voices)

    precision = _apply_precision(lm_model, codec_model, quantize, torch_device, engine_config, report,
                                 load_fp32=lambda: (load_lm(lm_dir, device=torch_device, dtype=lm_dtype),
                                                    load_codec(codec_dir, device=torch_device, dtype=torch.float32)),
                                 measured=measured)
    lm_model, codec_model = precision.lm, precision.codec
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
        "lm": str(lm),
        "codec": str(codec),
        "device": str(torch_device),
        "devices": [str(d) for d in engine_devices],
        "dtype": str(lm_dtype).removeprefix("torch."),
        "codec_dtype": "float32",
        "quantize": precision.choice.mode if precision.choice.mode in QUANT_MODES else None,
        "precision": precision.choice.reason,
        "threads": torch.get_num_threads() if torch_device.type == "cpu" else None,
    }
    return LoadedParts(tokenizer=text_tokenizer, engine=engine, voices=voices, info=info,
                       lm_config=lm_model.config, pending_mode=precision.pending)
