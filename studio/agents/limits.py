"""Limits of the voice-agent sockets (docs/API.md, "Voice agents: limits").

Per server: sockets open at once. Per socket: an idle timeout, the largest message, how long a send
may wait for a client that stops reading (then the socket is closed and its streams cancelled), and
the session's limits (`tts_core.speaking.SessionLimits`: contexts, buffered text, piece length,
buffering delay).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tts_core.speaking import SessionLimits


@dataclass(frozen=True, slots=True)
class AgentLimits:
    """Bounds of the agent sockets.

    Args:
        max_sockets: sockets open at once over the server; the next is refused (503).
        idle_timeout_s: a socket with no open context that receives nothing this long is closed
            (Cartesia closes idle sockets after 5 minutes).
        send_timeout_s: a message the client does not take within this is the end of the socket:
            a client that stops reading cannot hold a stream (or its memory) for long.
        max_message_bytes: the largest message a client may send; a larger one gets an error
            message and is dropped (the socket stays open).
        session: per-socket limits of contexts and text.
    """

    max_sockets: int = 256
    idle_timeout_s: float = 300.0
    send_timeout_s: float = 15.0
    max_message_bytes: int = 64 * 1024
    session: SessionLimits = field(default_factory=SessionLimits)

    def __post_init__(self) -> None:
        if isinstance(self.max_sockets, bool) or not isinstance(self.max_sockets, int) or self.max_sockets < 1:
            raise ValueError(f"max_sockets must be a positive integer, got {self.max_sockets!r}")
        if not (self.idle_timeout_s > 0 and self.send_timeout_s > 0):
            raise ValueError("idle_timeout_s and send_timeout_s must be > 0")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes!r}")
