"""Request guards for the whole app (our routes and Gradio's): body size, bodies in flight, body
read deadlines, CORS (docs/RELIABILITY.md, "Limits" and "Security").

`BodyLimitMiddleware` refuses a body over the limit before reading it or once it passes it (413,
then a bounded "lingering close"), sums bodies in flight as their bytes arrive (503) and enforces
the body read deadlines (`body_idle_s`, `body_min_rate_bps`: 408); `CORSMiddleware` keeps the app
same-origin, turning off Gradio's own CORS. Refusals count in `GuardCounters` (/metrics).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import anyio
from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import error_body
from ..settings import ServerSettings

RETRY_AFTER_S = 2
DRAIN_MAX_S = 5.0  # lingering close: how long, and how much, of a refused body is read and discarded
DRAIN_MAX_BYTES = 256 * 1024 * 1024
_EXPOSED_HEADERS = ["X-Sample-Rate", "X-Channels", "X-Sample-Format", "X-Voice", "X-Request-Id",
                    "X-Estimated-Duration", "X-Audio-Format", "X-Speed", "X-Framing"]


@dataclass(slots=True)
class GuardCounters:
    """What the guards refused or cut since start (for /metrics). Changed on the event loop only."""

    connection_cap: int = 0  # set by the server (connections.uvicorn_config)
    connections_open: int = 0
    connections_peak: int = 0
    connections_refused: int = 0
    head_timeouts: int = 0
    body_timeouts: int = 0
    bodies_too_large: int = 0
    bodies_busy: int = 0


class BodyTooLarge(HTTPException):
    """Raised from `receive` when a body passes the limit. An HTTPException, so FastAPI hands it to
    the app's handler (OpenAI error shape) instead of turning it into "error parsing the body"."""

    code = "request_too_large"

    def __init__(self, limit: int):
        super().__init__(413, f"request body is larger than {limit} bytes: send a shorter text or a "
                              "smaller reference clip (3-10 s is plenty)")


class BodiesInFlight(HTTPException):
    code = "server_busy"

    def __init__(self) -> None:
        super().__init__(503, "server busy receiving other large requests; try again in a few seconds",
                         headers={"Retry-After": str(RETRY_AFTER_S)})


class BodyTimeout(HTTPException):
    code = "request_timeout"

    def __init__(self, idle_s: float, min_rate_bps: float) -> None:
        super().__init__(408, f"the request body arrived too slowly (a pause of over {idle_s:g} s, or "
                              f"under {min_rate_bps / 1024:g} KiB/s on average): send it again")


def _first_guard_error(exc: BaseException) -> HTTPException | None:
    if isinstance(exc, (BodyTooLarge, BodiesInFlight, BodyTimeout)):
        return exc
    inner_errors = getattr(exc, "exceptions", None)  # an exception group, from a task group
    if isinstance(inner_errors, (list, tuple)):
        for inner in inner_errors:
            found = _first_guard_error(inner)
            if found is not None:
                return found
    return None


class BodyLimitMiddleware:
    """See the module docstring. One instance per app; the in-flight sum lives on the event loop."""

    def __init__(self, app: ASGIApp, *, settings: ServerSettings, counters: GuardCounters | None = None):
        self.app = app
        self.limit = settings.body_limit_bytes
        self.inflight_limit = settings.inflight_body_limit_bytes
        self.idle_s, self.min_rate_bps = settings.body_idle_s, settings.body_min_rate_bps
        self.counters = counters if counters is not None else GuardCounters()
        self.inflight_bytes = 0  # bytes received so far of the bodies of requests in progress

    def _allowed_wait_s(self, received: int, waited_s: float) -> float:
        """How long the next read may wait, given the bytes received and the time already waited."""
        return max(0.0, min(self.idle_s, self.idle_s + received / self.min_rate_bps - waited_s))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            self.counters.bodies_too_large += 1
            await _send_error(send, BodyTooLarge(self.limit), receive)
            return
        if declared and self.inflight_bytes + declared > self.inflight_limit:  # what has arrived already
            self.counters.bodies_busy += 1
            await _send_error(send, BodiesInFlight(), receive)
            return
        counted = 0  # also what this request holds of the in-flight sum
        waited_s = 0.0
        body_done = declared == 0 or (scope.get("method") in ("GET", "HEAD") and not declared)
        started = False
        refused: HTTPException | None = None  # what limited_receive raised, if it did

        async def limited_receive() -> Message:
            nonlocal counted, waited_s, body_done, refused
            if body_done:  # after the body only "http.disconnect" comes: no deadline on waiting for it
                return await receive()
            allowed = self._allowed_wait_s(counted, waited_s)
            began = time.monotonic()
            with anyio.move_on_after(allowed) as timer:
                message = await receive()
            waited_s += time.monotonic() - began
            if timer.cancelled_caught:
                self.counters.body_timeouts += 1
                refused = BodyTimeout(self.idle_s, self.min_rate_bps)
                raise refused
            if message["type"] == "http.request":
                size = len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if counted + size > self.limit:
                    self.counters.bodies_too_large += 1
                    refused = BodyTooLarge(self.limit)
                    raise refused
                if size and self.inflight_bytes + size > self.inflight_limit:
                    self.counters.bodies_busy += 1
                    refused = BodiesInFlight()
                    raise refused
                self.inflight_bytes += size
                counted += size
            else:
                body_done = True
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if refused is not None:  # the app answered our refusal: the connection ends after it
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            elif (refused is not None and not isinstance(refused, BodyTimeout)
                  and message["type"] == "http.response.body" and not message.get("more_body", False)):
                await send({**message, "more_body": True})  # the answer is out; then drain, then end
                await _drain(receive)
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except BaseException as exc:
            guard_error = _first_guard_error(exc)
            if guard_error is None or started:
                raise
            await _send_error(send, guard_error, None if isinstance(guard_error, BodyTimeout) else receive)
        finally:
            self.inflight_bytes -= counted


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _drain(receive: Receive) -> None:
    """Read and discard what the client still sends, for at most DRAIN_MAX_S / DRAIN_MAX_BYTES."""
    drained = 0
    with anyio.move_on_after(DRAIN_MAX_S):
        while drained < DRAIN_MAX_BYTES:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            drained += len(message.get("body", b""))


async def _send_error(send: Send, exc: HTTPException, receive: Receive | None) -> None:
    """The OpenAI error shape, sent directly, before the body is read; then a bounded drain of the
    body (none when `receive` is None: a client too slow to send it), and the connection is closed."""
    body = json.dumps(error_body(str(exc.detail), error_type="invalid_request_error" if exc.status_code < 500
                                 else "server_error", code=getattr(exc, "code", None))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (exc.headers or {}).items()]
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    if receive is None:
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return
    await send({"type": "http.response.body", "body": body, "more_body": True})
    await _drain(receive)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def install_http_guards(app: FastAPI, settings: ServerSettings, *, counters: GuardCounters | None = None) -> None:
    """Add the CORS policy and the body limits to `app` (call before it starts serving)."""
    app.add_middleware(
        CORSMiddleware, allow_origins=list(settings.cors_allow_origins), allow_methods=["GET", "POST"],
        allow_headers=["Content-Type", "Authorization"], expose_headers=_EXPOSED_HEADERS,
    )
    app.add_middleware(BodyLimitMiddleware, settings=settings, counters=counters)
