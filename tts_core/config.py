"""The library's configuration: `SamplingParams` (a request's), `EngineConfig` (the engine's limits)
and `LoadConfig` (what `Synthesizer.from_pretrained` loads, where, on which device, in which
precision). The web app composes the last two with its own sections into one `StudioConfig`
(`studio/settings.py`). Model architecture configs live beside the models (`model/*_config.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from .devices import default_active_streams
from .errors import InvalidRequestError

# The official checkpoints (Hugging Face repo ids); the one place they are written down.
DEFAULT_LM_ID = "OpenMOSS-Team/MOSS-TTS-Nano"
DEFAULT_CODEC_ID = "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano"


def _check_range(name: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    bad = not math.isfinite(value) or value > high or (value <= low if low_open else value < low)
    if bad:
        bracket = "(" if low_open else "["
        raise InvalidRequestError(
            f"{name} must be in {bracket}{low}, {high}], got {value!r}", param=name, code="out_of_range"
        )


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How codes and the continue/stop decision are drawn.

    Defaults are the official runtime's (docs/spec/LM.md §5.3): audio temperature 0.8, top-p 0.95, top-k 25,
    repetition penalty 1.2; text temperature 1.0 for the 2-way continue/stop decision.
    `do_sample=False` means argmax everywhere (the repetition penalty still applies, as in the
    reference); `SamplingParams.greedy()` also sets the penalty to 1.0.
    """

    do_sample: bool = True
    audio_temperature: float = 0.8
    audio_top_p: float = 0.95
    audio_top_k: int = 25
    audio_repetition_penalty: float = 1.2
    text_temperature: float = 1.0
    text_top_p: float = 1.0
    text_top_k: int = 50

    def __post_init__(self) -> None:
        _check_range("audio_temperature", self.audio_temperature, 0.0, 10.0, low_open=True)
        _check_range("text_temperature", self.text_temperature, 0.0, 10.0, low_open=True)
        _check_range("audio_top_p", self.audio_top_p, 0.0, 1.0, low_open=True)
        _check_range("text_top_p", self.text_top_p, 0.0, 1.0, low_open=True)
        _check_range("audio_repetition_penalty", self.audio_repetition_penalty, 1.0, 10.0)
        for name in ("audio_top_k", "text_top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 1024 * 16:
                raise InvalidRequestError(
                    f"{name} must be an integer >= 0 (0 disables top-k), got {value!r}",
                    param=name,
                    code="out_of_range",
                )

    @classmethod
    def greedy(cls) -> SamplingParams:
        """Argmax for the stop decision and every code, no repetition penalty (reference greedy)."""
        return cls(do_sample=False, audio_repetition_penalty=1.0)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Limits and knobs of the in-process engine."""

    # Streams decoded together in one batched step; None: by device (`devices.default_active_streams`:
    # one per usable CPU core, `GPU_ACTIVE_STREAMS` per GPU), resolved by `for_device`.
    max_active_streams: int | None = None
    max_queue: int = 16  # requests waiting for a slot before new ones are refused
    max_text_chars: int = 4096
    max_context_rows: int = 2048  # global KV length per stream (prompt + generated rows)
    voice_clone_max_text_tokens: int = 75  # long-text chunk budget (docs/spec/LM.md §4.7)
    enforce_eager: bool = False  # GPU: skip CUDA graphs
    # GPU: serve at once on the plain step while the compiled step and its CUDA graphs are built in
    # a background thread (the engine switches over between steps); off = build them before serving.
    defer_compile: bool = True
    pipeline_codec: bool | None = None  # codec on a second thread; None = on CUDA, or a CPU with >= 2 cores
    # An engine iteration still running after this long means the device stopped finishing work:
    # every stream is failed and the server must be restarted (`engine/stall.py`).
    stall_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_active_streams is not None and self.max_active_streams < 1:
            raise ValueError(f"max_active_streams must be >= 1, got {self.max_active_streams}")
        if self.max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {self.max_queue}")
        if self.max_text_chars < 1:
            raise ValueError(f"max_text_chars must be >= 1, got {self.max_text_chars}")
        if not self.stall_timeout_s > 0:
            raise ValueError(f"stall_timeout_s must be > 0, got {self.stall_timeout_s}")

    def for_device(self, device_type: str) -> EngineConfig:
        """This config with `max_active_streams` resolved for a device of `device_type`."""
        if self.max_active_streams is not None:
            return self
        return replace(self, max_active_streams=default_active_streams(device_type))


QUANTIZE_MODES = ("auto", "fp32", "fp16", "int8")


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """What `Synthesizer.from_pretrained` loads, and where and how (`loader.load_parts`).

    Args:
        lm, codec: Hugging Face ids or local directories with config.json and weights.
        tokenizer: path to tokenizer.model; None: the one in the LM directory.
        voices_dir: local folder with the presets' reference clips (else they are downloaded when
            allowed, or reported unavailable).
        device: "auto" (CUDA when present), "cpu", "cuda", "cuda:1".
        devices: engines' devices, "cuda:0,cuda:1" (or a tuple): one engine per device, each request
            going to the least loaded. None: every visible GPU when `device` is "auto" or "cuda",
            else `device` alone.
        dtype: LM precision, "auto" = bf16 (fp16 below compute capability 8.0) on CUDA, fp32 on CPU.
            The codec stays fp32.
        quantize: CPU weight precision (`precision.py`): "fp32" (bit-faithful), "fp16", "int8", or
            "auto" (the most faithful mode that runs in real time here, measured once per machine).
        cache_dir: encoded voices, the CPU mode chosen, compile caches. None: MOSS_TTS_CACHE_DIR,
            else ~/.cache/moss_tts_studio (`loader.default_cache_dir`).
        threads: torch's CPU threads. None: MOSS_TTS_NUM_THREADS, else half the usable CPUs (<= 8).
        allow_download: fetch preset clips from the network. None: unless HF_HUB_OFFLINE=1.
    """

    lm: str = DEFAULT_LM_ID
    codec: str = DEFAULT_CODEC_ID
    tokenizer: str | None = None
    voices_dir: str | None = None
    device: str = "auto"
    devices: str | tuple[str, ...] | None = None
    dtype: str = "auto"
    quantize: str = "fp32"
    cache_dir: str | None = None
    threads: int | None = None
    allow_download: bool | None = None

    def __post_init__(self) -> None:
        for name in ("tokenizer", "voices_dir", "cache_dir"):  # paths given as Path objects too
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                object.__setattr__(self, name, str(value))
        if isinstance(self.devices, list):
            object.__setattr__(self, "devices", tuple(self.devices))
        if str(self.quantize).strip().lower() not in QUANTIZE_MODES:
            raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_MODES)}, got {self.quantize!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or self.threads < 1):
            raise ValueError(f"threads must be >= 1, got {self.threads!r}")

    def with_options(self, **options: Any) -> LoadConfig:
        """This config with the fields named in `options` replaced (a TypeError names an unknown one)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown load option {', '.join(unknown)}; LoadConfig's fields are "
                            f"{', '.join(sorted(known))}")
        return replace(self, **options) if options else self
