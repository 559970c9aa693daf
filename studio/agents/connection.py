"""One agent socket's life, whatever its protocol: read messages, deliver each context's audio, end.

`AgentConnection.run(handler)` reads the client's messages one at a time, in order, and hands each
text to the protocol's handler; a message over the size limit, not text, or failing the handler's
checks gets the protocol's error message and the socket stays usable. A socket that receives nothing for `idle_timeout_s` while none
of its contexts speaks is closed. Each context's audio is read
by a `StreamPump` (a thread from the pump pool: the context's chunks through the protocol's writer,
a `SpeechRender` inside) and sent by a task of this connection; `cancel(context_id)` stops that at
once: the pump's thread stops writing, the task stops sending, the engine frees the slot. Sends go
one at a time; one that the client does not take within `send_timeout_s` ends the socket. When the
socket ends (client gone, idle timeout, error), every context is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from tts_core.errors import TTSError
from tts_core.speaking import SpeakingSession, SpeechContext

from ..delivery.stream_pump import StreamPump
from .limits import AgentLimits

logger = logging.getLogger(__name__)

# What a protocol supplies: the writer of one context's chunks (runs in the pump's thread; each
# call returns the messages to send: text, or bytes sent as binary), and its error message.
Writer = Callable[..., list]
ErrorMessage = Callable[[str | None, TTSError], str]


class SlowClient(Exception):
    """The client did not take a message in time."""


@dataclass(slots=True)
class Delivery:
    """One context's audio on its way out."""

    context: SpeechContext
    pump: StreamPump | None = None
    task: asyncio.Task | None = None


class AgentConnection:
    """A socket's session, sends and deliveries (see the module docstring)."""

    def __init__(self, websocket: WebSocket, limits: AgentLimits, *, protocol: str,
                 error_message: ErrorMessage, on_cancel: Callable[[], None] | None = None):
        self.websocket = websocket
        self.limits = limits
        self.protocol = protocol
        self.session = SpeakingSession(limits.session)
        self._error_message = error_message
        self._on_cancel = on_cancel
        self._send_lock = asyncio.Lock()
        self._deliveries: dict[str, Delivery] = {}
        self._closed = False
        self._closing: asyncio.Task | None = None
        self.cancelled_at: dict[str, float] = {}  # context id -> when its cancel was handled (bench)
        self.last_audio_at: dict[str, float] = {}  # context id -> when its last audio message was sent

    # ---- sending --------------------------------------------------------------------------------

    async def send(self, message: str | bytes) -> None:
        """Send one message (bytes as a binary one); SlowClient when the client does not take it within
        send_timeout_s."""
        async with self._send_lock:
            if self._closed:
                raise WebSocketDisconnect(1006)
            sending = self.websocket.send_bytes(message) if isinstance(message, bytes) else \
                self.websocket.send_text(message)
            try:
                await asyncio.wait_for(sending, self.limits.send_timeout_s)
            except asyncio.TimeoutError:
                raise SlowClient(f"a message waited {self.limits.send_timeout_s:g} s for the client") from None

    async def send_error(self, context_id: str | None, exc: TTSError) -> None:
        with contextlib.suppress(WebSocketDisconnect, SlowClient, RuntimeError):
            await self.send(self._error_message(context_id, exc))

    # ---- contexts -------------------------------------------------------------------------------

    def deliver(self, context_id: str, context: SpeechContext, writer: Writer, *,
                is_audio: Callable[[str | bytes], bool]) -> None:
        """Start sending `context`'s audio, written by `writer` (`is_audio(message)`: for the bench's
        record of the last audio sent)."""
        delivery = Delivery(context)
        self._deliveries[context_id] = delivery
        delivery.pump = StreamPump(lambda: context)
        delivery.pump.start(writer)
        delivery.task = asyncio.create_task(self._send_context(context_id, delivery, is_audio),
                                            name=f"agent-{self.protocol}-{context_id[:16]}")

    async def _send_context(self, context_id: str, delivery: Delivery, is_audio: Callable[[str | bytes], bool]) -> None:
        pump = delivery.pump
        assert pump is not None
        try:
            first = await pump.first()
            if first is not None:
                async for messages in pump.output():
                    for message in messages:
                        await self.send(message)
                        if is_audio(message):
                            self.last_audio_at[context_id] = time.monotonic()
        except TTSError as exc:
            await self.send_error(context_id, exc)
        except (WebSocketDisconnect, SlowClient, RuntimeError) as exc:
            logger.info("agent socket (%s): %s; closing it", self.protocol, exc)
            asyncio.get_running_loop().call_soon(self._abort)
        finally:
            await pump.close()
            self.session.forget(context_id, delivery.context)
            if self._deliveries.get(context_id) is delivery:
                del self._deliveries[context_id]

    async def finished(self, context_id: str) -> None:
        """Wait until the context's audio is all sent (or it was cancelled)."""
        delivery = self._deliveries.get(context_id)
        if delivery is not None and delivery.task is not None:
            await asyncio.wait({delivery.task})

    async def close(self, code: int = 1000, reason: str = "bye") -> None:
        """Close the socket (the read loop then ends)."""
        await self._close(code, reason)

    def cancel(self, context_id: str) -> bool:
        """Stop a context now: nothing more of it is sent; its stream is cancelled, its slot freed."""
        delivery = self._deliveries.pop(context_id, None)
        found = self.session.cancel(context_id)
        if delivery is not None:
            if delivery.pump is not None:
                delivery.pump.cancel()  # the pump's thread writes nothing more
            if delivery.task is not None:
                delivery.task.cancel()  # and nothing it already wrote is sent
        self.cancelled_at[context_id] = time.monotonic()
        if (found or delivery is not None) and self._on_cancel is not None:
            self._on_cancel()
        return found or delivery is not None

    # ---- the socket's life ----------------------------------------------------------------------

    async def run(self, handle: Callable[[AgentConnection, str], Awaitable[None]]) -> None:
        """Read and handle messages until the client leaves or the socket times out; then cancel
        every context."""
        try:
            while True:
                try:
                    message = await asyncio.wait_for(self.websocket.receive(), self.limits.idle_timeout_s)
                except asyncio.TimeoutError:
                    if not all(d.context.idle for d in self._deliveries.values()):
                        continue  # speaking: not idle
                    await self._close(1000, "idle timeout")
                    return
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None:
                    await self.send_error(None, TTSError("send JSON text messages, not binary ones",
                                                         code="invalid_message"))
                    continue
                if len(text) > self.limits.max_message_bytes:
                    await self.send_error(None, TTSError(
                        f"the message is {len(text)} characters; at most {self.limits.max_message_bytes} are "
                        "accepted: send the text in smaller pieces", code="message_too_large"))
                    continue
                await handle(self, text)
        except (WebSocketDisconnect, SlowClient, RuntimeError) as exc:
            logger.info("agent socket (%s) ended: %s", self.protocol, exc)
        finally:
            await self._teardown()

    def _abort(self) -> None:
        """A send failed: close the socket (the read loop then ends and tears down)."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(1011, "the client did not read in time"))

    async def _close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        for context_id in list(self._deliveries):
            self.cancel(context_id)
        if self.websocket.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.websocket.close(code, reason), 2.0)

    async def _teardown(self) -> None:
        deliveries = list(self._deliveries.items())
        for context_id, _ in deliveries:
            self.cancel(context_id)
        self.session.close()
        tasks = [d.task for _, d in deliveries if d.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._close(1000, "bye")
