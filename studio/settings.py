"""The web app's configuration: one frozen `StudioConfig`, built once from flags and the environment
(`flags.parse_config`), logged at start and shown in `/health`. Its sections go where they are used:
`engine` and `load` (the library's `EngineConfig`, `LoadConfig`) to the model's factory, `server`
(`ServerSettings`) and the page mode (`PageConfig`) to `create_app` and uvicorn. docs/RELIABILITY.md
lists every limit in one table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tts_core.config import DEFAULT_CODEC_ID, DEFAULT_LM_ID, EngineConfig, LoadConfig

from .page_slot import PageMode

# Bytes a JSON body may need beyond the base64 clip: the text fields (up to 6 bytes per character
# when JSON-escaped as \uXXXX, twice for input + ref_text) and the small fields.
_JSON_OVERHEAD_PER_CHAR = 12
_JSON_OVERHEAD_BYTES = 64 * 1024


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The HTTP server: where it listens, its request limits, network policy and identity.

    Args:
        host, port: the address served (`--host`, `--port`).
        log_level: the server's logging level.
        max_text_chars: longest `input` / `text` (and `ref_text`) accepted, in characters (the
            engine's limit, checked here before a request reaches it; OpenAI's is 4096).
        max_upload_bytes: largest reference clip accepted (`ref_audio` after base64 / data-URL
            decoding, or downloaded); larger ones are refused with 413 before they are decoded.
        max_ref_audio_s: longest reference clip accepted, in seconds, read from the file's header
            and checked while decoding (never by decoding it all first): longer ones get 413.
            Accepted clips are still trimmed to their first 20 s by the voice bank.
        allow_remote_audio: let `ref_audio` be an http(s) URL that the server downloads. Off by
            default: a public server that fetches URLs for anyone can be used to probe its network.
            Even when on, only public addresses are fetched (see `studio.limits.netguard`).
        remote_audio_timeout_s: total time allowed to download a remote `ref_audio` (DNS,
            connecting, redirects and body together).
        remote_audio_allow_hosts: "host" or "host:port" entries exempt from the public-address
            rule, for a trusted internal mirror or for tests on 127.0.0.1. Empty in production.
            The exemption is exact: "127.0.0.1:8080" does not exempt "localhost:8080" or port 8081.
        cors_allow_origins: origins allowed to call the server from another site's page. Empty
            (the default) = same-origin only, for our routes and Gradio's alike.
        lm_id, codec_id: the checkpoints (the load section's, named here for the HTTP layer): a
            repo id is listed by `GET /v1/models`; a local path never leaves the server.
        browser_build: an `export-web` build folder to serve at /browser (the page then offers
            "This browser" as its engine); None = not offered.
        encoder_processes: worker processes that encode the compressed stream formats (mp3, opus,
            aac, flac; `audio/encoder_pool.py`); 0 = in this process.
        max_connections: connections open at once (lowered to the open-file limit minus
            `fd_reserve`); the next one gets 503 at once (`limits/connections.py`).
        fd_reserve: file descriptors kept free for everything else (model files, uploads, logs).
        header_timeout_s: time allowed for a complete request head when no request is in progress.
        keep_alive_s: an idle kept-alive connection is closed after this.
        body_idle_s: longest wait for the next piece of a request body (also the allowance before
            the average rate counts; `limits/guards.py`).
        body_min_rate_bps: a body must arrive at this average rate or faster, measured over the
            time spent waiting for it beyond `body_idle_s` (16 KiB/s: a 13 MiB body may take 14 min).
        api_key: when set, the voice-agent sockets (`studio/agents/`) admit only clients that send
            it (X-API-Key, Authorization: Bearer/Token, or ?api_key=). None = open.
    """

    host: str = "127.0.0.1"
    port: int = 7860
    log_level: str = "INFO"
    max_text_chars: int = 4096
    max_upload_bytes: int = 10 * 1024 * 1024
    max_ref_audio_s: float = 60.0
    allow_remote_audio: bool = False
    remote_audio_timeout_s: float = 15.0
    remote_audio_allow_hosts: tuple[str, ...] = ()
    cors_allow_origins: tuple[str, ...] = ()
    lm_id: str = DEFAULT_LM_ID
    codec_id: str = DEFAULT_CODEC_ID
    browser_build: str | None = None
    encoder_processes: int = 0
    max_connections: int = 2048
    fd_reserve: int = 256
    header_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    body_idle_s: float = 10.0
    body_min_rate_bps: float = 16 * 1024
    api_key: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_text_chars", "max_upload_bytes", "max_connections"):
            _positive_int(name, getattr(self, name))
        for name in ("max_ref_audio_s", "remote_audio_timeout_s", "header_timeout_s", "keep_alive_s", "body_idle_s",
                     "body_min_rate_bps"):
            _positive(name, getattr(self, name))
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port!r}")
        for name in ("remote_audio_allow_hosts", "cors_allow_origins"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ValueError(f"{name} must be a tuple of non-empty strings, got {value!r}")
            object.__setattr__(self, name, tuple(v.strip() for v in value))
        if "*" in self.cors_allow_origins:
            raise ValueError("cors_allow_origins must list origins; '*' is refused (it would allow any site)")
        for name in ("encoder_processes", "fd_reserve"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")

    @property
    def body_limit_bytes(self) -> int:
        """The request-body cap: a base64 clip of `max_upload_bytes` (4/3 larger) and the text fields."""
        base64_bytes = -(-self.max_upload_bytes * 4 // 3)
        return base64_bytes + _JSON_OVERHEAD_PER_CHAR * self.max_text_chars + _JSON_OVERHEAD_BYTES

    @property
    def inflight_body_limit_bytes(self) -> int:
        """Sum of request bodies held in memory at once, over all requests in progress (their
        declared or read sizes), before new ones get 503 + Retry-After."""
        return 4 * self.body_limit_bytes


@dataclass(frozen=True, slots=True)
class PageConfig:
    """The Gradio page at /: served (`ui`; built once the model is ready, while the API already
    answers), and whether this is ZeroGPU mode (the page's audio from GPU calls; built before serving)."""

    ui: bool = True
    zerogpu: bool = False

    @property
    def mode(self) -> PageMode:
        if self.zerogpu:
            return PageMode.NOW
        return PageMode.DEFERRED if self.ui else PageMode.OFF


@dataclass(frozen=True, slots=True)
class StudioConfig:
    """The web app's whole configuration (see the module doc)."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    server: ServerSettings = field(default_factory=ServerSettings)
    page: PageConfig = field(default_factory=PageConfig)


def shown(settings: ServerSettings) -> dict[str, Any]:
    """The server section as the start-up log and `/health` show it: the API key as "set", never itself."""
    return {**asdict(settings), "api_key": "set" if settings.api_key else None}
