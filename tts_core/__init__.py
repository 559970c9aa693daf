"""MOSS-TTS-Nano streaming synthesizer: native PyTorch LM + codec, engine, voices.

Public API::

    from tts_core import Synthesizer, SynthesisRequest, SamplingParams, Voice
    synth = Synthesizer.from_pretrained()
    for chunk in synth.stream(SynthesisRequest(text="Hello!", voice="Ava")):
        ...  # chunk.pcm: float32 [2, n] at 48 kHz

Heavy modules (torch) are imported on first use so `import tts_core` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .config import EngineConfig, LoadConfig, SamplingParams
from .errors import (
    InvalidRequestError,
    ModelLoadError,
    PayloadTooLargeError,
    QueueFullError,
    TTSError,
    VoiceNotFoundError,
    VoiceUnavailableError,
)
from .types import AudioChunk, SynthesisRequest, SynthesisResult, Timings, Voice

if TYPE_CHECKING:
    from .synthesizer import Synthesizer

__all__ = [
    "AudioChunk",
    "EngineConfig",
    "InvalidRequestError",
    "LoadConfig",
    "ModelLoadError",
    "PayloadTooLargeError",
    "QueueFullError",
    "SamplingParams",
    "SynthesisRequest",
    "SynthesisResult",
    "Synthesizer",
    "TTSError",
    "Timings",
    "Voice",
    "VoiceNotFoundError",
    "VoiceUnavailableError",
]


def __getattr__(name: str) -> Any:
    if name == "Synthesizer":
        return import_module(".synthesizer", __name__).Synthesizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
