"""Who may open an agent socket: the server's API key (when one is set) and the socket cap.

The key is read where the stock clients put it: `X-API-Key` (Cartesia, Pipecat and LiveKit),
`Authorization: Bearer <key>` or `Token <key>` (OpenAI, Deepgram), or the `api_key` query parameter
(Cartesia's browser form). Compared in constant time. A refusal is an HTTP answer to the handshake
(401, or 503 with Retry-After at the cap), which the clients report as such.
"""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse

from ..errors import error_body
from ..limits.guards import RETRY_AFTER_S


def presented_key(connection: HTTPConnection) -> str | None:
    """The key the client sent, wherever it put it (None: none)."""
    header = connection.headers.get("x-api-key")
    if header:
        return header.strip()
    authorization = connection.headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() in ("bearer", "token") and value.strip():
        return value.strip()
    return connection.query_params.get("api_key") or None


def key_accepted(connection: HTTPConnection, api_key: str | None) -> bool:
    """True when the server needs no key or the client sent the right one."""
    if not api_key:
        return True
    given = presented_key(connection)
    return given is not None and hmac.compare_digest(given.encode(), api_key.encode())


def unauthorized() -> JSONResponse:
    body = error_body("missing or wrong API key: send it as the X-API-Key header (or Authorization: Bearer, "
                      "or ?api_key=)", error_type="authentication_error", code="invalid_api_key")
    return JSONResponse(body, status_code=401)


def busy(message: str) -> JSONResponse:
    return JSONResponse(error_body(message, error_type="server_error", code="busy"), status_code=503,
                        headers={"Retry-After": str(RETRY_AFTER_S)})


class SocketCount:
    """Sockets open now, against the cap (event loop only)."""

    def __init__(self, cap: int):
        self.cap = cap
        self.open = 0

    def try_open(self) -> bool:
        if self.open >= self.cap:
            return False
        self.open += 1
        return True

    def closed(self) -> None:
        self.open -= 1
