"""Public request/response dataclasses of the synthesizer (the boundary every caller uses)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

import numpy as np

from .config import SamplingParams
from .errors import InvalidRequestError

SAMPLE_RATE_HZ = 48_000
NUM_CHANNELS = 2
SAMPLES_PER_FRAME = 3840  # per channel; one frame = 80 ms
NUM_CODEBOOKS = 16
CODEBOOK_SIZE = 1024

Mode = Literal["voice_clone", "continuation"]


class VoiceKind(str, Enum):
    PRESET = "preset"
    AUDIO = "audio"
    CODES = "codes"


@dataclass(frozen=True, slots=True)
class Voice:
    """Who speaks: a preset name, a reference clip (path or bytes), or pre-encoded codes [T, 16].

    `transcript` is the reference clip's text; it is only used in `continuation` mode.
    """

    kind: VoiceKind
    name: str | None = None
    audio: bytes | str | None = None
    codes: np.ndarray | None = field(default=None, compare=False)
    transcript: str | None = None

    @classmethod
    def preset(cls, name: str) -> Voice:
        if not isinstance(name, str) or not name.strip():
            raise InvalidRequestError("voice must be a non-empty preset name", param="voice")
        return cls(kind=VoiceKind.PRESET, name=name.strip())

    @classmethod
    def from_audio(cls, path_or_bytes: str | os.PathLike | bytes, transcript: str | None = None) -> Voice:
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            data = bytes(path_or_bytes)
            if not data:
                raise InvalidRequestError("reference audio is empty: upload a 3-10 s clip", param="ref_audio")
            return cls(kind=VoiceKind.AUDIO, audio=data, transcript=_clean_transcript(transcript))
        if isinstance(path_or_bytes, (str, os.PathLike)):
            path = os.fspath(path_or_bytes)
            if not os.path.isfile(path):
                raise InvalidRequestError(f"reference audio file not found: {path}", param="ref_audio")
            return cls(kind=VoiceKind.AUDIO, audio=path, transcript=_clean_transcript(transcript))
        raise InvalidRequestError("reference audio must be a file path or bytes", param="ref_audio")

    @classmethod
    def from_codes(cls, codes: np.ndarray | list, transcript: str | None = None) -> Voice:
        array = np.asarray(codes)
        if array.ndim != 2 or array.shape[1] != NUM_CODEBOOKS or array.shape[0] < 1:
            raise InvalidRequestError(
                f"voice codes must have shape [T, {NUM_CODEBOOKS}] with T >= 1, got {list(array.shape)}",
                param="voice",
            )
        if not np.issubdtype(array.dtype, np.integer):
            raise InvalidRequestError("voice codes must be integers", param="voice")
        if array.min() < 0 or array.max() >= CODEBOOK_SIZE:
            raise InvalidRequestError(f"voice codes must be in [0, {CODEBOOK_SIZE})", param="voice")
        array = np.ascontiguousarray(array, dtype=np.int64)
        array.setflags(write=False)
        return cls(kind=VoiceKind.CODES, codes=array, transcript=_clean_transcript(transcript))


def _clean_transcript(transcript: str | None) -> str | None:
    if transcript is None:
        return None
    if not isinstance(transcript, str):
        raise InvalidRequestError("ref_text must be a string", param="ref_text")
    transcript = transcript.strip()
    return transcript or None


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """One thing to say.

    Args:
        text: what to say (1..max chars; long text is split into sentences and streamed as one).
        voice: a `Voice`, a preset name, or None for the default preset.
        mode: "voice_clone" (reference codes as a prompt; the official default) or "continuation"
            (the model continues the reference audio; needs `voice.transcript`, or no voice at all).
        sampling: `SamplingParams()` (official defaults) or `SamplingParams.greedy()`.
        seed: makes sampling reproducible; None draws a fresh seed.
        max_frames: cap on generated frames (80 ms each); None = proportional to the text length.
        normalize_text: apply the text normalisation of docs/spec/LM.md §4.6 before tokenizing.
    """

    text: str
    voice: Voice | str | None = None
    mode: Mode = "voice_clone"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    max_frames: int | None = None
    normalize_text: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidRequestError("text must be a string", param="text")
        if not self.text.strip():
            raise InvalidRequestError("text is empty: type something to say", param="text", code="empty_text")
        if isinstance(self.voice, str):
            object.__setattr__(self, "voice", Voice.preset(self.voice))
        elif self.voice is not None and not isinstance(self.voice, Voice):
            raise InvalidRequestError("voice must be a Voice, a preset name or None", param="voice")
        if self.mode not in ("voice_clone", "continuation"):
            raise InvalidRequestError(
                f"mode must be 'voice_clone' or 'continuation', got {self.mode!r}", param="mode"
            )
        if not isinstance(self.sampling, SamplingParams):
            raise InvalidRequestError("sampling must be a SamplingParams", param="sampling")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63
        ):
            raise InvalidRequestError(f"seed must be an integer in [0, 2^63), got {self.seed!r}", param="seed")
        if self.max_frames is not None and (
            isinstance(self.max_frames, bool) or not isinstance(self.max_frames, int) or self.max_frames < 1
        ):
            raise InvalidRequestError(
                f"max_frames must be a positive integer (80 ms each), got {self.max_frames!r}",
                param="max_frames",
            )


@dataclass(frozen=True, slots=True)
class Timings:
    """Wall-clock figures of one request, in seconds from submission."""

    first_audio_s: float | None  # submission -> first PCM available
    elapsed_s: float  # submission -> this chunk
    audio_s: float  # audio seconds produced so far

    @property
    def rtf(self) -> float | None:
        return self.elapsed_s / self.audio_s if self.audio_s > 0 else None


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """A piece of a stream's audio. `pcm` float32 [2, n] at 48 kHz; `codes` int [f, 16] (may be empty).
    What belongs to the whole stream (its id, notice, estimated length) is on its `Stream`."""

    seq: int
    pcm: np.ndarray
    codes: np.ndarray
    is_last: bool
    timings: Timings
    is_pause: bool = False
    segment: int = 0  # which text segment (sentence chunk) this audio speaks; a pause belongs to the one before
    segment_text: str = ""  # that segment's text


@dataclass(frozen=True, slots=True)
class SynthesisResult:
    """The whole output of `Synthesizer.synthesize`."""

    pcm: np.ndarray  # float32 [2, n]
    sample_rate: int
    codes: np.ndarray  # int64 [F, 16] generated codes (all text chunks, in order)
    timings: Timings
    request_id: str = ""
    notice: str | None = None
