"""The voice-agent routes: `/tts/websocket` (Cartesia's protocol). Each socket is admitted (API key,
socket cap, model ready), then served by an `AgentConnection` with its protocol's handler; `/metrics`
counts sockets, contexts, cancels and refusals (`api/metrics.py`).
"""

from __future__ import annotations

import dataclasses
import logging

from fastapi import APIRouter, WebSocket

from ..api.voices_api import SavedVoices
from ..service import ServiceState, SynthesizerService
from ..settings import ServerSettings
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

    @router.websocket("/tts/websocket")
    async def cartesia_socket(websocket: WebSocket) -> None:
        metrics = getattr(websocket.app.state, "metrics", None)
        refusal = None
        if not key_accepted(websocket, settings.api_key):
            refusal, reason = unauthorized(), "unauthorized"
        elif service.state is not ServiceState.READY:
            refusal, reason = busy(f"the model is not ready ({service.status}); try again shortly"), "not_ready"
        elif not sockets.try_open():
            refusal, reason = busy(f"{sockets.cap} agent sockets are open, the most this server takes"), "busy"
        if refusal is not None:
            if metrics is not None:
                metrics.agent_refused.labels("cartesia", reason).inc()
            await websocket.send_denial_response(refusal)
            return
        if metrics is not None:
            metrics.agent_sessions.labels("cartesia").inc()
            metrics.agent_sessions_open.inc()
        try:
            await websocket.accept()
            on_cancel = (lambda: metrics.agent_cancels.labels("cartesia").inc()) if metrics is not None else None
            conn = AgentConnection(websocket, limits, protocol="cartesia", error_message=error_message,
                                   on_cancel=on_cancel)
            await conn.run(CartesiaHandler(synth=service.get(), settings=settings, saved=saved, metrics=metrics))
        finally:
            sockets.closed()
            if metrics is not None:
                metrics.agent_sessions_open.dec()

    return router

