"""Exceptions raised at public entry points.

Every error carries the request field it is about (`param`) and a message that says how to fix
the input. They know nothing of HTTP: the web app maps each class to a status
(`studio.errors.http_status`).
"""

from __future__ import annotations


class TTSError(Exception):
    """Base class. `param` names the offending field (or None); `code` is a stable short id."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequestError(TTSError, ValueError):
    """The request is malformed: a field is missing, out of range or of the wrong kind."""


class VoiceNotFoundError(InvalidRequestError):
    """A preset voice name that the catalog does not know."""


class PayloadTooLargeError(InvalidRequestError):
    """An upload or field larger than the configured limit."""


class VoiceUnavailableError(TTSError):
    """A known preset whose source could not be obtained (offline, missing file)."""


class QueueFullError(TTSError):
    """The engine has no free slot and its wait queue is full; retry after `retry_after_s`."""

    def __init__(self, message: str, *, retry_after_s: float = 2.0):
        super().__init__(message, code="queue_full")
        self.retry_after_s = retry_after_s


class ModelLoadError(TTSError):
    """Weights could not be found or loaded; the message says where it looked and what to do."""


class EngineStalledError(TTSError):
    """The device stopped finishing work (`engine/stall.py`): streams in progress were ended and
    new ones are refused until the server is restarted."""

    def __init__(self, message: str):
        super().__init__(message, code="engine_stalled")
        self.retry_after_s = 60.0
