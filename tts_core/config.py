"""Run-time configuration dataclasses: sampling parameters and engine limits.

Model architecture configs live beside the models (`model/lm_config.py`, `model/codec_config.py`)
because they are read from the checkpoints' config.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

    max_active_streams: int = 4  # streams decoded together in one batched step
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
        if self.max_active_streams < 1:
            raise ValueError(f"max_active_streams must be >= 1, got {self.max_active_streams}")
        if self.max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {self.max_queue}")
        if self.max_text_chars < 1:
            raise ValueError(f"max_text_chars must be >= 1, got {self.max_text_chars}")
        if not self.stall_timeout_s > 0:
            raise ValueError(f"stall_timeout_s must be > 0, got {self.stall_timeout_s}")
