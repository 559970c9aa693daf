"""Request guards for the whole app (our routes and Gradio's): body size, bodies in flight, CORS.

`install_http_guards(app, settings)` adds two ASGI middlewares:

- `BodyLimitMiddleware`: a request whose Content-Length is over `settings.body_limit_bytes` gets
  413 at once, before one byte of its body is read; a chunked body is counted while it is read and
  refused (413) as soon as it passes the limit, so no route ever buffers more than the limit.
  After a refusal the rest of the body is read and discarded for a bounded time (a "lingering
  close", as nginx does): closing a socket with unread data resets it, and the client would lose
  the 413 it had not read yet. The bodies held at once are summed; a request that would take the sum over
  `settings.inflight_body_limit_bytes` gets 503 + Retry-After (a flood of large uploads cannot
  exhaust memory).
- Starlette's `CORSMiddleware` with `settings.cors_allow_origins` (empty by default): no
  `Access-Control-Allow-Origin` is ever sent for another site, and preflights from other origins
  are refused. Its presence also turns off Gradio's own CORS handling, which otherwise reflects
  any Origin when the server is reached under a non-localhost name (i.e. on a public Space).
"""

from __future__ import annotations

import json

import anyio
from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_body
from .settings import ServerSettings

RETRY_AFTER_S = 2
DRAIN_MAX_S = 5.0  # lingering close: how long, and how much, of a refused body is read and discarded
DRAIN_MAX_BYTES = 256 * 1024 * 1024
_EXPOSED_HEADERS = ["X-Sample-Rate", "X-Channels", "X-Sample-Format", "X-Voice", "X-Request-Id", "X-Audio-Seconds"]


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


def _first_guard_error(exc: BaseException) -> HTTPException | None:
    if isinstance(exc, (BodyTooLarge, BodiesInFlight)):
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

    def __init__(self, app: ASGIApp, *, limit: int, inflight_limit: int):
        self.app = app
        self.limit = limit
        self.inflight_limit = inflight_limit
        self.inflight_bytes = 0  # read or declared bytes of the bodies of requests in progress

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await _send_error(send, BodyTooLarge(self.limit), receive)
            return
        if declared and self.inflight_bytes + declared > self.inflight_limit:
            await _send_error(send, BodiesInFlight(), receive)
            return
        reserved = declared or 0
        self.inflight_bytes += reserved
        counted = 0
        started = refused = False

        async def limited_receive() -> Message:
            nonlocal counted, reserved, refused
            message = await receive()
            if message["type"] == "http.request":
                counted += len(message.get("body", b""))
                if counted > self.limit:
                    refused = True
                    raise BodyTooLarge(self.limit)
                if counted > reserved:  # no (or a lying) Content-Length: reserve as it arrives
                    grow = counted - reserved
                    if self.inflight_bytes + grow > self.inflight_limit:
                        refused = True
                        raise BodiesInFlight()
                    self.inflight_bytes += grow
                    reserved += grow
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            if refused and message["type"] == "http.response.body" and not message.get("more_body", False):
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
            await _send_error(send, guard_error, receive)
        finally:
            self.inflight_bytes -= reserved


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


async def _send_error(send: Send, exc: HTTPException, receive: Receive) -> None:
    """The OpenAI error shape, sent directly, before the body is read; then a bounded drain of the
    body, and the connection is closed."""
    body = json.dumps(error_body(str(exc.detail), error_type="invalid_request_error" if exc.status_code < 500
                                 else "server_error", code=getattr(exc, "code", None))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (exc.headers or {}).items()]
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": True})
    await _drain(receive)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def install_http_guards(app: FastAPI, settings: ServerSettings) -> None:
    """Add the CORS policy and the body limits to `app` (call before it starts serving)."""
    app.add_middleware(
        CORSMiddleware, allow_origins=list(settings.cors_allow_origins), allow_methods=["GET", "POST"],
        allow_headers=["Content-Type", "Authorization"], expose_headers=_EXPOSED_HEADERS,
    )
    app.add_middleware(BodyLimitMiddleware, limit=settings.body_limit_bytes,
                       inflight_limit=settings.inflight_body_limit_bytes)
