"""Schemas and constants of the OpenAI-compatible API (`studio/api/openai_api.py` serves them).

Pydantic models only: what `/docs` shows, what a body may contain, and the names this API uses
where the engine's differ (`SAMPLING_FIELDS`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
MODEL_NAME = "moss-tts-nano"  # the id this server answers to (listed first in `GET /v1/models`, the sockets)
MEDIA_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac", "wav": "audio/wav",
    "pcm": "audio/pcm",
}
S16_FORMATS = ("pcm", "wav")  # 16-bit samples as they are: X-Sample-Format says s16le
OPENAI_VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar"}
)
OPENAI_MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
# OpenAI's pcm: what clients of those model names play raw pcm as.
OPENAI_PCM_RATE_HZ = 24_000
OPENAI_PCM_CHANNELS = 1
# API field -> SamplingParams field, for building the params and for renaming their errors.
SAMPLING_FIELDS = {
    "temperature": "audio_temperature", "top_p": "audio_top_p", "top_k": "audio_top_k",
    "repetition_penalty": "audio_repetition_penalty", "text_temperature": "text_temperature",
    "text_top_p": "text_top_p", "text_top_k": "text_top_k", "do_sample": "do_sample",
}


class VoiceId(BaseModel):
    id: str = Field(description="A preset name or a saved voice id (OpenAI's custom-voice object form).")


class SpeechRequest(BaseModel):
    """Body of `POST /v1/audio/speech`: OpenAI's fields plus this server's extensions."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "moss-tts-nano", "input": "Hello from MOSS-TTS-Nano!", "voice": "alloy", "response_format": "wav"},
    ]})

    model: str = Field("moss-tts-nano", description=(
        "Model id. 'moss-tts-nano', the checkpoint's Hub id, and OpenAI's names (tts-1, tts-1-hd, "
        "gpt-4o-mini-tts and dated variants) all select this server's one model."))
    input: str = Field(description="Text to speak, at most the server's max_text_chars (default 4096) characters.")
    voice: str | VoiceId | None = Field(None, description=(
        "Preset name from GET /v1/voices, a saved voice id (voice_..., from POST /v1/audio/voices), or "
        "{\"id\": ...}. OpenAI voice names (alloy, echo, ...) pick a preset that speaks the input's "
        "language. Omitted: the default preset. Ignored when ref_audio is given."))
    response_format: ResponseFormat = Field("mp3", description=(
        "Audio encoding: mp3, opus (Ogg), aac (ADTS), flac, wav (16-bit) or pcm (raw 16-bit little-endian, "
        "channels interleaved). 48 kHz stereo, except pcm under OpenAI's model names (tts-1, tts-1-hd, "
        "gpt-4o-mini-tts): 24 kHz mono, as OpenAI sends it. With stream_format 'sse' the default is pcm."))
    speed: float = Field(1.0, description=(
        "0.25 to 4.0; 1.0 is the natural rate. Pitch-preserving time-stretch (Rubber Band), streamed: "
        "other values delay the first audio by about 0.3 s of speech."))
    instructions: str | None = Field(None, description=(
        "Accepted for OpenAI compatibility and ignored: this model has no instruction (style) control."))
    stream: bool = Field(False, description=(
        "The audio is sent as it is generated (chunked) in every format, as OpenAI's own API does; "
        "flac only when this (or stream_format 'audio') is set: otherwise one file of exact length."))
    stream_format: Literal["audio", "sse"] | None = Field(None, description=(
        "OpenAI's field. 'audio': raw audio bytes sent as generated (mp3, opus, aac and flac encoded "
        "progressively). 'sse': text/event-stream of speech.audio.delta events (base64 'audio' in "
        "response_format, pcm by default), speech.segment captions when timestamps is true, then "
        "speech.audio.done with usage. Omitted: raw audio bytes, as 'audio'."))
    sample_rate: int | None = Field(None, description=(
        "Extension (as vllm-omni). Output sample rate: 8000, 12000, 16000, 22050, 24000, 32000, 44100 or "
        "48000 (opus: 8000, 12000, 16000, 24000, 48000). Overrides the rate the model name implies; the "
        "channels stay as they are. X-Sample-Rate and X-Channels say what was sent."))
    timestamps: bool = Field(False, description=(
        "Extension. With stream_format 'sse': a {type: 'speech.segment', index, text, start, end} event "
        "per sentence chunk, in order, right after its audio; start/end in seconds of the output (speed "
        "applied). Without sse it is refused."))
    ref_audio: str | None = Field(None, description=(
        "Extension. Reference clip to clone (3-10 s is best): base64 or a data: URL of any common "
        "audio file (mono or stereo, 16 kHz or more), at most max_upload_bytes (default 10 MiB) and "
        "max_ref_audio_s (default 60 s; only the first 20 s are used). http(s) URLs only where the "
        "server allows them, and only to public addresses; never a file path."))
    ref_text: str | None = Field(None, description=(
        "Extension. Transcript of ref_audio; switches to continuation mode (the model continues the clip)."))
    seed: int | None = Field(None, description="Extension. Same seed and settings -> same audio.")
    temperature: float | None = Field(None, description="Extension. Audio sampling temperature, (0, 10]; default 0.8.")
    top_p: float | None = Field(None, description="Extension. Audio nucleus sampling, (0, 1]; default 0.95.")
    top_k: int | None = Field(None, description="Extension. Audio top-k, 0 disables; default 25.")
    repetition_penalty: float | None = Field(None, description="Extension. Audio repetition penalty, [1, 10]; default 1.2.")
    text_temperature: float | None = Field(None, description="Extension. Temperature of the continue/stop decision.")
    text_top_p: float | None = Field(None, description="Extension. Top-p of the continue/stop decision.")
    text_top_k: int | None = Field(None, description="Extension. Top-k of the continue/stop decision.")
    do_sample: bool | None = Field(None, description="Extension. false: argmax everywhere (penalty still applies).")
    greedy: bool = Field(False, description="Extension. Reference greedy decoding: argmax, no repetition penalty.")
    max_frames: int | None = Field(None, description="Extension. Cap on generated frames (80 ms each).")


class VoiceInfo(BaseModel):
    name: str
    language: str | None = None
    gender: str | None = None
    description: str | None = None
    available: bool
    unavailable_reason: str | None = None


class VoiceList(BaseModel):
    object: Literal["list"] = "list"
    default: str = Field(description="The preset used when a request names no voice.")
    data: list[VoiceInfo]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


_AUDIO_SCHEMA = {"schema": {"type": "string", "format": "binary"}}
SPEECH_RESPONSES: dict = {
    200: {
        "description": "Audio, or text/event-stream with stream_format 'sse'. Headers: X-Sample-Rate, "
        "X-Channels, X-Voice, X-Audio-Format, X-Speed; X-Sample-Format (s16le) for pcm and wav; "
        "X-Estimated-Duration (seconds, speed applied).",
        "content": {**{media: _AUDIO_SCHEMA for media in MEDIA_TYPES.values()},
                    "text/event-stream": {"schema": {"type": "string"}}},
    },
    400: {"model": ErrorResponse, "description": "Invalid field; `param` names it."},
    404: {"model": ErrorResponse, "description": "Unknown voice or model."},
    413: {"model": ErrorResponse, "description": "Request body, ref_audio or its duration over the server's limit."},
    503: {"model": ErrorResponse, "description": "Busy (queue full) or still loading; see Retry-After."},
}
