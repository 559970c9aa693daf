"""`SpeakingSession`: one client's utterances (`SpeechContext`s) by id, within the session's limits.

A protocol adapter opens a context for each new id, finds it again for continuations, cancels or
forgets it. The session bounds how many contexts are open at once (at the bound, the oldest context
that has spoken and waits for more text is ended to make room) and remembers the ids it cancelled
recently, so text that was already on its way for a cancelled utterance is dropped instead of
starting it again. Thread-safe; `close()` cancels every open context (the client left).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.stream import Stream
from ..errors import InvalidRequestError
from .context import SpeechContext

_REMEMBERED_CANCELS = 256


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """Bounds of one session (one socket).

    Args:
        max_contexts: utterances open at once (a new one beyond gets an error).
        max_buffered_chars: unspoken text one utterance may hold.
        max_piece_chars: the longest text one stream speaks (longer waiting text is cut).
        default_delay_s: how long text waits for a clause or sentence boundary when the client
            does not say (Cartesia's default, 3 s).
        max_delay_s: the longest wait a client may ask for.
    """

    max_contexts: int = 16
    max_buffered_chars: int = 20_000
    max_piece_chars: int = 1000
    default_delay_s: float = 3.0
    max_delay_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_contexts", "max_buffered_chars", "max_piece_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0 <= self.default_delay_s <= self.max_delay_s:
            raise ValueError("0 <= default_delay_s <= max_delay_s is required")


class SpeakingSession:
    """A client's open utterances (see the module docstring)."""

    def __init__(self, limits: SessionLimits | None = None):
        self.limits = limits or SessionLimits()
        self._lock = threading.Lock()
        self._contexts: dict[str, SpeechContext] = {}
        self._cancelled: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.opened = 0  # contexts opened over the session's life
        self.cancels = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._contexts)

    def get(self, context_id: str) -> SpeechContext | None:
        with self._lock:
            return self._contexts.get(context_id)

    def was_cancelled(self, context_id: str) -> bool:
        with self._lock:
            return context_id in self._cancelled

    def open(self, context_id: str, start: Callable[[str], Stream], *, max_delay_s: float | None = None) -> SpeechContext:
        """A new utterance under `context_id` (`start` submits one piece's text)."""
        delay = self.limits.default_delay_s if max_delay_s is None else max_delay_s
        if not 0 <= delay <= self.limits.max_delay_s:
            raise InvalidRequestError(
                f"max_buffer_delay_ms must be between 0 and {round(self.limits.max_delay_s * 1000)}, "
                f"got {round(delay * 1000)}", param="max_buffer_delay_ms", code="out_of_range")
        with self._lock:
            if context_id in self._contexts:
                raise InvalidRequestError(f"context {context_id[:64]!r} is already open", param="context_id")
            if len(self._contexts) >= self.limits.max_contexts:
                self._end_oldest_idle()
            if len(self._contexts) >= self.limits.max_contexts:
                raise InvalidRequestError(
                    f"{len(self._contexts)} contexts are open on this connection, the most allowed: end or cancel "
                    "one (continue: false, or cancel: true) before starting another",
                    param="context_id", code="too_many_contexts")
            context = SpeechContext(start, max_delay_s=delay, max_piece_chars=self.limits.max_piece_chars,
                                    max_buffered_chars=self.limits.max_buffered_chars)
            self._contexts[context_id] = context
            self.opened += 1
            return context

    def _end_oldest_idle(self) -> None:
        """Make room: the oldest context that waits for text with nothing to speak ends (its client left
        it open: LiveKit, interrupted, never ends its contexts). Holds the lock."""
        for context_id, context in self._contexts.items():
            if context.idle and context.pieces:
                del self._contexts[context_id]
                context.end_input()
                return

    def cancel(self, context_id: str) -> bool:
        """Cancel the utterance now and forget it; False when no such context was open."""
        with self._lock:
            context = self._contexts.pop(context_id, None)
            self._cancelled[context_id] = None
            while len(self._cancelled) > _REMEMBERED_CANCELS:
                self._cancelled.popitem(last=False)
            if context is not None:
                self.cancels += 1
        if context is None:
            return False
        context.cancel()
        return True

    def forget(self, context_id: str, context: SpeechContext) -> None:
        """The utterance ended (its audio is out, or it failed): its id may be used again."""
        with self._lock:
            if self._contexts.get(context_id) is context:
                del self._contexts[context_id]

    def close(self) -> None:
        """Cancel every open utterance (the client is gone)."""
        with self._lock:
            contexts, self._contexts = list(self._contexts.values()), {}
        for context in contexts:
            context.cancel()
