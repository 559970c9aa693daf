"""Exceptions raised at public entry points.

Every error carries the request field it is about (`param`) and a message that says how to fix
the input. Only the HTTP layer turns these into responses.
"""

from __future__ import annotations


class TTSError(Exception):
    """Base class. `param` names the offending field (or None); `code` is a stable short id."""

    status_code = 500
    error_type = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequestError(TTSError, ValueError):
    """The request is malformed: a field is missing, out of range or of the wrong kind."""

    status_code = 400
    error_type = "invalid_request_error"


class VoiceNotFoundError(InvalidRequestError):
    """A preset voice name that the catalog does not know."""

    status_code = 404


class PayloadTooLargeError(InvalidRequestError):
    """An upload or field larger than the configured limit."""

    status_code = 413


class VoiceUnavailableError(TTSError):
    """A known preset whose source could not be obtained (offline, missing file)."""

    status_code = 503
    error_type = "voice_unavailable"


class QueueFullError(TTSError):
    """The engine has no free slot and its wait queue is full; retry later."""

    status_code = 503
    error_type = "server_busy"

    def __init__(self, message: str, *, retry_after_s: float = 2.0):
        super().__init__(message, code="queue_full")
        self.retry_after_s = retry_after_s


class ModelLoadError(TTSError):
    """Weights could not be found or loaded; the message says where it looked and what to do."""

    error_type = "model_load_error"
