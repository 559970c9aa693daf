"""Settings of the HTTP layer: request limits, network policy and what the OpenAI-compatible API reports.

Built once by `studio/flags.py` (from command-line flags / environment) and handed to `create_app` and
to `build_openai_router`. Engine limits (concurrent streams, queue depth) live in
`config.EngineConfig`, not here; docs/RELIABILITY.md lists every limit in one table.
"""

from __future__ import annotations

from dataclasses import dataclass

from tts_core.config import DEFAULT_CODEC_ID, DEFAULT_LM_ID

# Bytes a JSON body may need beyond the base64 clip: the text fields (up to 6 bytes per character
# when JSON-escaped as \uXXXX, twice for input + ref_text) and the small fields.
_JSON_OVERHEAD_PER_CHAR = 12
_JSON_OVERHEAD_BYTES = 64 * 1024


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Limits, network policy and identity of the web server.

    Args:
        max_text_chars: longest `input` / `text` (and `ref_text`) accepted, in characters (OpenAI's
            limit is 4096).
        max_upload_bytes: largest reference clip accepted (`ref_audio` after base64 / data-URL
            decoding, or downloaded); larger ones are refused with 413 before they are decoded.
        max_ref_audio_s: longest reference clip accepted, in seconds, read from the file's header
            and checked while decoding (never by decoding it all first): longer ones get 413.
            Accepted clips are still trimmed to their first 20 s by the voice bank.
        ref_audio_max_channels: reference clips with more channels are refused (400); a voice
            recording is mono or stereo.
        ref_audio_min_sample_rate_hz: reference clips sampled below this are refused (400): the
            output is 48 kHz and the codec needs the upper band to copy a voice.
        ref_audio_max_sample_rate_hz: reference clips sampled above this are refused (400) from
            the header, before decoding: no voice recording needs it, and decoding cost grows with it.
        max_body_bytes: largest HTTP request body, counted while it is read (413, before the rest
            is read). None = derived from max_upload_bytes (base64 grows data by 4/3) and
            max_text_chars; see `body_limit_bytes`.
        max_inflight_body_bytes: request bodies that may be held in memory at once, summed over
            all requests in progress (their declared or read sizes); a request that would exceed
            it gets 503 + Retry-After. None = 4 x `body_limit_bytes`.
        allow_remote_audio: let `ref_audio` be an http(s) URL that the server downloads. Off by
            default: a public server that fetches URLs for anyone can be used to probe its network.
            Even when on, only public addresses are fetched (see `studio.limits.netguard`).
        remote_audio_timeout_s: total time allowed to download a remote `ref_audio` (DNS,
            connecting, redirects and body together).
        remote_audio_max_redirects: redirects followed, each re-checked like the first URL.
        remote_audio_allow_hosts: "host" or "host:port" entries exempt from the public-address
            rule, for a trusted internal mirror or for tests on 127.0.0.1. Empty in production.
            The exemption is exact: "127.0.0.1:8080" does not exempt "localhost:8080" or port 8081.
        cors_allow_origins: origins allowed to call the server from another site's page. Empty
            (the default) = same-origin only, for our routes and Gradio's alike.
        lm_id: the language model checkpoint, a Hugging Face repo id or a local directory. A repo id
            is listed by `GET /v1/models`; a local path never leaves the server.
        codec_id: the codec checkpoint, as `lm_id` (reported by health pages, never as a path).
        model_name: the id this server answers to and lists first in `GET /v1/models`.
        browser_build: an `export-web` build folder to serve at /browser (the page then offers
            "This browser" as its engine); None = not offered.
        encoder_processes: worker processes that encode the compressed stream formats (mp3, opus,
            aac, flac; `audio/encoder_pool.py`); 0 = in this process. The command line resolves
            its default (`encoder_pool.default_encoder_processes`).
        api_key: when set, the voice-agent sockets (`studio/agents/`) admit only clients that send
            it (X-API-Key, Authorization: Bearer/Token, or ?api_key=). None = open.
    """

    max_text_chars: int = 4096
    max_upload_bytes: int = 10 * 1024 * 1024
    max_ref_audio_s: float = 60.0
    ref_audio_max_channels: int = 2
    ref_audio_min_sample_rate_hz: int = 16_000
    ref_audio_max_sample_rate_hz: int = 192_000
    max_body_bytes: int | None = None
    max_inflight_body_bytes: int | None = None
    allow_remote_audio: bool = False
    remote_audio_timeout_s: float = 15.0
    remote_audio_max_redirects: int = 3
    remote_audio_allow_hosts: tuple[str, ...] = ()
    cors_allow_origins: tuple[str, ...] = ()
    lm_id: str = DEFAULT_LM_ID
    codec_id: str = DEFAULT_CODEC_ID
    browser_build: str | None = None
    model_name: str = "moss-tts-nano"
    encoder_processes: int = 0
    api_key: str | None = None

    def __post_init__(self) -> None:
        _positive_int("max_text_chars", self.max_text_chars)
        _positive_int("max_upload_bytes", self.max_upload_bytes)
        _positive_int("ref_audio_max_channels", self.ref_audio_max_channels)
        _positive_int("ref_audio_min_sample_rate_hz", self.ref_audio_min_sample_rate_hz)
        _positive_int("ref_audio_max_sample_rate_hz", self.ref_audio_max_sample_rate_hz)
        if self.ref_audio_max_sample_rate_hz < self.ref_audio_min_sample_rate_hz:
            raise ValueError("ref_audio_max_sample_rate_hz must be >= ref_audio_min_sample_rate_hz")
        if self.max_body_bytes is not None:
            _positive_int("max_body_bytes", self.max_body_bytes)
        if self.max_inflight_body_bytes is not None:
            _positive_int("max_inflight_body_bytes", self.max_inflight_body_bytes)
        if not self.max_ref_audio_s > 0:
            raise ValueError(f"max_ref_audio_s must be > 0, got {self.max_ref_audio_s!r}")
        if not self.remote_audio_timeout_s > 0:
            raise ValueError(f"remote_audio_timeout_s must be > 0, got {self.remote_audio_timeout_s!r}")
        if isinstance(self.remote_audio_max_redirects, bool) or not 0 <= self.remote_audio_max_redirects <= 10:
            raise ValueError(f"remote_audio_max_redirects must be in [0, 10], got {self.remote_audio_max_redirects!r}")
        for name in ("remote_audio_allow_hosts", "cors_allow_origins"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ValueError(f"{name} must be a tuple of non-empty strings, got {value!r}")
            object.__setattr__(self, name, tuple(v.strip() for v in value))
        if "*" in self.cors_allow_origins:
            raise ValueError("cors_allow_origins must list origins; '*' is refused (it would allow any site)")
        if isinstance(self.encoder_processes, bool) or not isinstance(self.encoder_processes, int) \
                or self.encoder_processes < 0:
            raise ValueError(f"encoder_processes must be an integer >= 0, got {self.encoder_processes!r}")
        if not self.model_name.strip():
            raise ValueError("model_name must be a non-empty string")

    @property
    def body_limit_bytes(self) -> int:
        """The request-body cap actually enforced (see `max_body_bytes`)."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        base64_bytes = -(-self.max_upload_bytes * 4 // 3)
        return base64_bytes + _JSON_OVERHEAD_PER_CHAR * self.max_text_chars + _JSON_OVERHEAD_BYTES

    @property
    def inflight_body_limit_bytes(self) -> int:
        """Sum of request bodies held at once before new ones get 503 (see `max_inflight_body_bytes`)."""
        if self.max_inflight_body_bytes is not None:
            return self.max_inflight_body_bytes
        return 4 * self.body_limit_bytes
