"""`/metrics` in the Prometheus text format, through `prometheus-client`, one registry per app (never
the process-wide default, so several apps in one process do not collide).

Gauges and counters read when scraped (`_Live`); stream histograms and outcomes observed when a
stream ends (`watch`); `tts_http_requests_total` counted by `RequestMetricsMiddleware`; per response
format, what an operator scales on (`observe_delivery`); the voice-agent sockets' sessions, contexts,
cancels and refusals. Every metric: docs/RELIABILITY.md
("Operability") and docs/SERVING.md ("Metrics to scale on").
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tts_core.engine.stream import Stream, StreamStatus
from tts_core.errors import InvalidRequestError, QueueFullError

TTFP_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
RTF_BUCKETS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
# Route groups (a fixed set, so labels stay few); anything else is "page" (Gradio and static files).
_ROUTES = (("/v1/audio/speech", "speech"), ("/api/tts/stream", "stream"), ("/health", "health"), ("/tts/", "agents"),
           ("/metrics", "metrics"), ("/v1/", "api"), ("/api/", "api"), ("/gradio_api/upload", "upload"),
           ("/gradio_api/", "page_events"), ("/player/", "player"))


def route_group(path: str) -> str:
    return next((name for prefix, name in _ROUTES if path.startswith(prefix)), "page")


def outcome_of(status: int | None) -> str:
    """A request's outcome from its status (None: the client left before any answer)."""
    if status is None:
        return "disconnected"
    if status < 400:
        return "ok"
    return {408: "timeout", 413: "too_large", 503: "busy"}.get(status, "client_error" if status < 500
                                                                 else "server_error")


class _Live(Collector):
    """Values read from the running server at scrape time."""

    def __init__(self, read: Callable[[], dict]):
        self.read = read

    def collect(self):
        values = self.read()
        gauges = {
            "tts_model_ready": "1 when the model is loaded and serving, else 0",
            "tts_engine_stalled": "1 when the device stopped responding (a restart is needed), else 0",
            "tts_active_streams": "streams being generated now",
            "tts_queued_requests": "requests waiting: the engine's queue plus clips waiting to be decoded",
            "tts_stream_slots": "streams generated together at most",
            "tts_queue_limit": "requests that may wait before new ones get 503",
            "tts_http_connections_open": "HTTP connections open now",
            "tts_http_connections_peak": "most HTTP connections open at once since start",
            "tts_http_connection_cap": "connections allowed open at once (the next get 503 at once); 0: not set",
            "tts_gradio_upload_files": "files in Gradio's upload folder after the last sweep",
            "tts_gradio_upload_bytes": "bytes in Gradio's upload folder after the last sweep",
            "tts_encoder_processes": "encoder worker processes running (0: formats encode in the server's process)",
            "tts_encoder_streams": "streams whose encoder runs in a worker process now",
        }
        for name, doc in gauges.items():
            if name in values:
                yield GaugeMetricFamily(name, doc, value=values[name])
        counters = {
            "tts_http_connections_refused": "connections answered 503 at once because the cap was reached",
            "tts_http_head_timeouts": "connections closed for not sending a request head in time (idle or slow)",
            "tts_http_body_timeouts": "requests refused with 408 for sending their body too slowly",
            "tts_http_bodies_too_large": "requests refused with 413 for their body size",
            "tts_http_bodies_busy": "requests refused with 503 because too many bodies were in flight",
            "tts_gradio_upload_evicted_files": "uploads deleted by the folder's size/count bound",
            "tts_encoder_worker_restarts": "encoder worker processes started again after one died",
        }
        for name, doc in counters.items():
            if name in values:
                yield CounterMetricFamily(name, doc, value=values[name])


class AppMetrics:
    """The app's registry; `read_live` returns the scrape-time values (see `_Live`)."""

    def __init__(self, read_live: Callable[[], dict]):
        self.registry = CollectorRegistry(auto_describe=True)
        self.ttfp = Histogram("tts_time_to_first_audio_seconds",
                              "from the request reaching the engine to its first audio", buckets=TTFP_BUCKETS,
                              registry=self.registry)
        self.rtf = Histogram("tts_real_time_factor", "generation time / audio length, per finished stream",
                             buckets=RTF_BUCKETS, registry=self.registry)
        self.streams = Counter("tts_streams", "synthesis streams by outcome (done, cancelled, refused, rejected, "
                               "failed)", ["outcome"], registry=self.registry)
        self.requests = Counter("tts_http_requests", "HTTP requests by route group and outcome",
                                ["route", "outcome"], registry=self.registry)
        self.encode_seconds = Counter("tts_encode_seconds", "CPU seconds spent making audio responses' bytes "
                                      "(encoding, resampling, stretch, framing), by format", ["format"],
                                      registry=self.registry)
        self.audio_out = Counter("tts_audio_out_seconds", "audio seconds sent in responses, by format", ["format"],
                                 registry=self.registry)
        self.bytes_out = Counter("tts_response_bytes", "bytes of audio responses sent, by format", ["format"],
                                 registry=self.registry)
        self.delivered_rtf = Histogram("tts_delivered_real_time_factor", "request reaching the engine to its last "
                                       "byte / audio length, per finished response, by format", ["format"],
                                       buckets=RTF_BUCKETS, registry=self.registry)
        self.agent_sessions = Counter("tts_agent_sessions", "voice-agent sockets accepted, by protocol", ["protocol"],
                                      registry=self.registry)
        self.agent_sessions_open = Gauge("tts_agent_sessions_open", "voice-agent sockets open now",
                                         registry=self.registry)
        self.agent_contexts = Counter("tts_agent_contexts", "voice-agent utterances (contexts) opened, by protocol",
                                      ["protocol"], registry=self.registry)
        self.agent_cancels = Counter("tts_agent_cancels", "voice-agent utterances cancelled by their client "
                                     "(barge-in), by protocol", ["protocol"], registry=self.registry)
        self.agent_refused = Counter("tts_agent_refused", "voice-agent sockets refused at the handshake, by protocol "
                                     "and reason (unauthorized, not_ready, busy, invalid)", ["protocol", "reason"],
                                     registry=self.registry)
        self.registry.register(_Live(read_live))

    def observe_delivery(self, fmt: str, *, audio_s: float, bytes_out: int, encode_s: float, elapsed_s: float,
                         finished: bool) -> None:
        """One speech response sent (or cut short: then its bytes count, not its delivered RTF)."""
        self.encode_seconds.labels(fmt).inc(max(encode_s, 0.0))
        self.audio_out.labels(fmt).inc(max(audio_s, 0.0))
        self.bytes_out.labels(fmt).inc(bytes_out)
        if finished and audio_s > 0:
            self.delivered_rtf.labels(fmt).observe(elapsed_s / audio_s)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def watch(self, stream: Stream) -> None:
        """Observe `stream` when it ends: TTFP, RTF (finished streams) and its outcome."""
        stream.on_end(self._ended)

    def rejected(self) -> None:
        """A request refused by the checks before it became a stream."""
        self.streams.labels("rejected").inc()

    def _ended(self, stream: Stream) -> None:
        if stream.first_audio_s is not None:
            self.ttfp.observe(stream.first_audio_s)
        if stream.status is StreamStatus.FINISHED:
            outcome = "done"
            if stream.audio_s > 0:
                self.rtf.observe((time.monotonic() - stream.submitted_at) / stream.audio_s)
        elif stream.status is StreamStatus.CANCELLED:
            outcome = "cancelled"
        elif isinstance(stream.error, QueueFullError):
            outcome = "refused"
        elif isinstance(stream.error, InvalidRequestError):
            outcome = "rejected"
        else:
            outcome = "failed"
        self.streams.labels(outcome).inc()


class RequestMetricsMiddleware:
    """Counts every HTTP request by route group and outcome (outermost, so refusals count too)."""

    def __init__(self, app: ASGIApp, *, metrics: AppMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: int | None = None

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.metrics.requests.labels(route_group(scope.get("path", "")), outcome_of(status)).inc()
