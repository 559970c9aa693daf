"""Connection-level limits of the HTTP server (docs/RELIABILITY.md, "Limits").

`GuardedH11Protocol` is uvicorn's h11 protocol with a connection cap (`ServerSettings.max_connections`)
answered `503` at once, before the client sends anything (uvicorn's `limit_concurrency` answers only
once a request arrives), and a request-head deadline whenever no request is in progress (uvicorn has
none); idle keep-alive is uvicorn's own. Built by `uvicorn_config` from the server's settings;
refusals are counted in `guards.GuardCounters`. A connection upgraded to a WebSocket leaves the
deadline (`studio/agents/` takes over) and still counts against the cap.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import resource

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import error_body
from ..settings import ServerSettings
from .guards import RETRY_AFTER_S, GuardCounters

logger = logging.getLogger(__name__)

REFUSE_LINGER_S = 0.5  # after a 503 at the cap, read (and drop) the client's request this long, then close
MAX_LINGERING = 512  # beyond this many lingering refusals, close at once
MAX_HEADER_BYTES = 16 * 1024  # largest request head (h11's incomplete-event limit); larger gets 400


def connection_cap(settings: ServerSettings, open_files_limit: int | None = None) -> int:
    """The cap actually enforced: `max_connections`, lowered to fit the open-file limit."""
    if open_files_limit is None:
        open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files_limit == resource.RLIM_INFINITY:
        return settings.max_connections
    return max(1, min(settings.max_connections, open_files_limit - settings.fd_reserve))


def raise_open_files_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit (many distros start at 1024);
    returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open-file limit from %d: %s", soft, exc)
    return soft


def _busy_response() -> bytes:
    body = json.dumps(error_body("server busy: too many connections open; try again in a few seconds",
                                 error_type="server_error", code="too_many_connections")).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nretry-after: {RETRY_AFTER_S}\r\nconnection: close\r\n\r\n")
    return head.encode("latin-1") + body


_BUSY = _busy_response()
_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 34\r\n"
            b"connection: close\r\n\r\nthe request head came too slowly\r\n")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's H11Protocol with the cap and the request-head deadline (see the module docstring)."""

    lingering = 0  # refusals waiting out REFUSE_LINGER_S, over all connections (event loop only)

    def __init__(self, *args, header_timeout_s: float, cap: int, counters: GuardCounters, **kwargs):
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s
        self.cap = cap
        self.counters = counters
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = False  # part of a request head arrived since the timer was armed
        self._refused = False
        self._upgraded = False  # handed to the WebSocket protocol: no more request heads here

    # ---- the cap ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.cap:
            self._refuse(transport)
            return
        self.counters.connections_open = len(self.connections)
        self.counters.connections_peak = max(self.counters.connections_peak, len(self.connections))
        self._sync_head_timer()

    def _refuse(self, transport: asyncio.Transport) -> None:
        self._refused = True
        self.connections.discard(self)
        self.counters.connections_refused += 1
        logger.warning("connection cap (%d) reached: answering 503 to new connections", self.cap)
        transport.write(_BUSY)
        if GuardedH11Protocol.lingering >= MAX_LINGERING or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()  # the answer is out; drop what the client still sends, briefly, then close
        GuardedH11Protocol.lingering += 1
        self.loop.call_later(REFUSE_LINGER_S, self._end_refusal)

    def _end_refusal(self) -> None:
        GuardedH11Protocol.lingering -= 1
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        waiting = self._head_timer is not None
        super().data_received(data)
        self._head_bytes = self._head_bytes or waiting
        self._sync_head_timer()

    def eof_received(self) -> bool | None:
        if self._refused:
            self.transport.close()
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._refused:
            return
        super().connection_lost(exc)
        self.counters.connections_open = len(self.connections)

    # ---- the request-head deadline --------------------------------------------------------------
    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._sync_head_timer()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._upgraded = True  # the socket is the WebSocket protocol's now (its own pings and limits)
        self._cancel_head_timer()
        super().handle_websocket_upgrade(event)

    def _between_requests(self) -> bool:
        return not self._upgraded and not self.transport.is_closing() and (
            self.cycle is None or self.cycle.response_complete)

    def _sync_head_timer(self) -> None:
        if self._between_requests():
            if self._head_timer is None:
                self._head_bytes = False
                self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)
        else:
            self._cancel_head_timer()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self._between_requests():
            return
        self.counters.head_timeouts += 1
        if self._head_bytes and self.conn.their_state is h11.IDLE:
            self.transport.write(_TIMEOUT)
        self.transport.close()


def uvicorn_config(app, settings: ServerSettings, *, counters: GuardCounters, **kwargs) -> uvicorn.Config:
    """A uvicorn Config serving `app` on `settings.host`:`settings.port` through `GuardedH11Protocol`
    (whatever HTTP parsers are installed), with the settings' connection limits."""
    cap = connection_cap(settings)
    counters.connection_cap = cap
    protocol = functools.partial(GuardedH11Protocol, header_timeout_s=settings.header_timeout_s, cap=cap,
                                 counters=counters)
    logger.info("connections: at most %d open (503 beyond), %g s for a request head, %g s idle keep-alive",
                cap, settings.header_timeout_s, settings.keep_alive_s)
    return uvicorn.Config(app, host=settings.host, port=settings.port, http=protocol,  # type: ignore[arg-type]
                          timeout_keep_alive=settings.keep_alive_s,  # type: ignore[arg-type]
                          h11_max_incomplete_event_size=MAX_HEADER_BYTES, **kwargs)
