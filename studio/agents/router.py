"""The voice-agent routes: `/tts/websocket` (Cartesia's protocol) and `/v1/speak` (Deepgram's).

Each socket is admitted (API key, socket cap, model ready; Deepgram's also its query and voice, which
its handshake carries), then served by an `AgentConnection` with its protocol's handler; `/metrics`
counts sockets, contexts, cancels and refusals (`api/metrics.py`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, WebSocket
from starlette.responses import JSONResponse

from tts_core.errors import TTSError

from ..api.openai_schemas import MODEL_NAME
from ..api.voices_api import SavedVoices
from ..errors import error_body, http_status
from ..service import ServiceState, SynthesizerService
from ..settings import ServerSettings
from . import deepgram
from .access import SocketCount, busy, key_accepted, unauthorized
from .cartesia import CartesiaHandler, error_message
from .connection import AgentConnection
from .limits import AgentLimits

logger = logging.getLogger(__name__)


def build_agents_router(service: SynthesizerService, settings: ServerSettings, saved: SavedVoices,
                        limits: AgentLimits | None = None) -> APIRouter:
    """The agent sockets, bound to the model, the server's settings (API key, text limit) and voices."""
    limits = limits or AgentLimits()
    session = limits.session
    if session.max_piece_chars > settings.max_text_chars:  # a piece is one request's text
        limits = dataclasses.replace(limits, session=dataclasses.replace(session, max_piece_chars=settings.max_text_chars))
    router = APIRouter(tags=["Voice agents"])
    sockets = SocketCount(limits.max_sockets)

    def refusal(websocket: WebSocket) -> tuple[JSONResponse, str] | None:
        if not key_accepted(websocket, settings.api_key):
            return unauthorized(), "unauthorized"
        if service.state is not ServiceState.READY:
            return busy(f"the model is not ready ({service.status}); try again shortly"), "not_ready"
        return None

    def full() -> tuple[JSONResponse, str] | None:
        """None when the socket took a place under the cap."""
        if sockets.try_open():
            return None
        return busy(f"{sockets.cap} agent sockets are open, the most this server takes"), "busy"

    @asynccontextmanager
    async def admitted(websocket: WebSocket, protocol: str) -> AsyncIterator[object | None]:
        """Counts the socket while it is open (`sockets.try_open()` took its place)."""
        metrics = getattr(websocket.app.state, "metrics", None)
        if metrics is not None:
            metrics.agent_sessions.labels(protocol).inc()
            metrics.agent_sessions_open.inc()
        try:
            yield metrics
        finally:
            sockets.closed()
            if metrics is not None:
                metrics.agent_sessions_open.dec()

    async def refuse(websocket: WebSocket, protocol: str, response: JSONResponse, reason: str) -> None:
        metrics = getattr(websocket.app.state, "metrics", None)
        if metrics is not None:
            metrics.agent_refused.labels(protocol, reason).inc()
        await websocket.send_denial_response(response)

    def connection(websocket: WebSocket, protocol: str, metrics, error) -> AgentConnection:
        on_cancel = (lambda: metrics.agent_cancels.labels(protocol).inc()) if metrics is not None else None
        return AgentConnection(websocket, limits, protocol=protocol, error_message=error, on_cancel=on_cancel)

    @router.websocket("/tts/websocket")
    async def cartesia_socket(websocket: WebSocket) -> None:
        if (refused := refusal(websocket) or full()) is not None:
            await refuse(websocket, "cartesia", *refused)
            return
        async with admitted(websocket, "cartesia") as metrics:
            await websocket.accept()
            conn = connection(websocket, "cartesia", metrics, error_message)
            await conn.run(CartesiaHandler(synth=service.get(), settings=settings, saved=saved, metrics=metrics))

    @router.websocket("/v1/speak")
    async def deepgram_socket(websocket: WebSocket) -> None:
        if (refused := refusal(websocket)) is not None:
            await refuse(websocket, "deepgram", *refused)
            return
        synth = service.get()
        try:
            speak = deepgram.speak_settings(websocket.query_params)
            base = await deepgram.prepared_request(speak, synth=synth, server_settings=settings, saved=saved)
        except TTSError as exc:
            status, kind = http_status(exc)
            body = error_body(exc.message, error_type=kind, param=exc.param, code=exc.code)
            await refuse(websocket, "deepgram", JSONResponse(body, status_code=status), "invalid")
            return
        if (refused := full()) is not None:
            await refuse(websocket, "deepgram", *refused)
            return
        async with admitted(websocket, "deepgram") as metrics:
            await websocket.accept()
            conn = connection(websocket, "deepgram", metrics, deepgram.warning)
            await conn.send(deepgram.metadata(speak, MODEL_NAME))
            await conn.run(deepgram.DeepgramHandler(synth=synth, base=base, settings=speak, metrics=metrics))

    return router
