"""Settings of the HTTP layer: request limits and what the OpenAI-compatible API reports.

Built once by `app.py` (from command-line flags / environment) and handed to `create_app` and to
`build_openai_router`. Engine limits (streams, queue) live in `config.EngineConfig`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_LM_ID = "OpenMOSS-Team/MOSS-TTS-Nano"
DEFAULT_CODEC_ID = "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano"


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Limits and identity of the web server.

    Args:
        max_text_chars: longest `input` text accepted, in characters (OpenAI's limit is 4096).
        max_upload_bytes: largest reference clip accepted (`ref_audio` after base64 / data-URL
            decoding, or downloaded); larger ones are refused with 413 before they are decoded.
        allow_remote_audio: let `ref_audio` be an http(s) URL that the server downloads. Off by
            default: a public server that fetches URLs for anyone can be used to probe its network.
        remote_audio_timeout_s: total time allowed to download a remote `ref_audio`.
        lm_id: the language model checkpoint, a Hugging Face repo id or a local directory. A repo id
            is listed by `GET /v1/models`; a local path never leaves the server.
        codec_id: the codec checkpoint, as `lm_id` (reported by health pages, never as a path).
        model_name: the id this server answers to and lists first in `GET /v1/models`.
    """

    max_text_chars: int = 4096
    max_upload_bytes: int = 10 * 1024 * 1024
    allow_remote_audio: bool = False
    remote_audio_timeout_s: float = 15.0
    lm_id: str = DEFAULT_LM_ID
    codec_id: str = DEFAULT_CODEC_ID
    model_name: str = "moss-tts-nano"

    def __post_init__(self) -> None:
        if isinstance(self.max_text_chars, bool) or not isinstance(self.max_text_chars, int) or self.max_text_chars < 1:
            raise ValueError(f"max_text_chars must be a positive integer, got {self.max_text_chars!r}")
        if (
            isinstance(self.max_upload_bytes, bool)
            or not isinstance(self.max_upload_bytes, int)
            or self.max_upload_bytes < 1
        ):
            raise ValueError(f"max_upload_bytes must be a positive integer, got {self.max_upload_bytes!r}")
        if not self.remote_audio_timeout_s > 0:
            raise ValueError(f"remote_audio_timeout_s must be > 0, got {self.remote_audio_timeout_s!r}")
        if not self.model_name.strip():
            raise ValueError("model_name must be a non-empty string")
