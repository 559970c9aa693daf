"""HTTP error translation: every failure leaves as OpenAI's error shape, never a stack trace.

`{"error": {"message", "type", "param", "code"}}` with the status `http_status` maps the exception
class to (the engine's exceptions know nothing of HTTP); 503 + Retry-After only where a retry can
help, and `x-should-retry: false` on a 5xx no retry mends (the OpenAI SDKs obey it). No message or
health field reveals a file-system path: `scrub_paths` cuts paths to their last component (the full
text stays in the log). docs/RELIABILITY.md, "Security".
"""

from __future__ import annotations

import logging
import math
import os
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tts_core.errors import (
    EngineStalledError,
    InvalidRequestError,
    ModelLoadError,
    PayloadTooLargeError,
    QueueFullError,
    TTSError,
    VoiceNotFoundError,
    VoiceUnavailableError,
)

logger = logging.getLogger(__name__)


class ModelNotReadyError(TTSError):
    """The model is still loading (the service raises it); retry after a few seconds."""

    def __init__(self, message: str):
        super().__init__(message, code="model_loading")
        self.retry_after_s = 5.0


class ModelNotFoundError(InvalidRequestError):
    """A `model` id this server does not answer to (OpenAI-compatible API)."""


# (status, OpenAI error type) per exception class; a class not listed takes its nearest base's entry.
_HTTP_STATUS: dict[type[BaseException], tuple[int, str]] = {
    TTSError: (500, "server_error"),
    InvalidRequestError: (400, "invalid_request_error"),
    VoiceNotFoundError: (404, "invalid_request_error"),
    ModelNotFoundError: (404, "invalid_request_error"),
    PayloadTooLargeError: (413, "invalid_request_error"),
    VoiceUnavailableError: (400, "invalid_request_error"),  # no retry helps: choose another voice
    QueueFullError: (503, "server_busy"),
    ModelNotReadyError: (503, "model_loading"),
    ModelLoadError: (500, "model_load_error"),
    EngineStalledError: (503, "engine_stalled"),
}


def http_status(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and OpenAI error type of `exc`: the entry of its closest class in the MRO."""
    for cls in type(exc).__mro__:
        found = _HTTP_STATUS.get(cls)
        if found is not None:
            return found
    return 500, "server_error"


# Route prefixes of this app: "/v1/voices" in a message is an address to call, not a file.
_ROUTE_ROOTS = frozenset({"v1", "api", "health", "player", "docs", "redoc", "openapi.json", "gradio_api"})
_PATH_CHARS = r"[^\s/\\'\"`()\[\]{}<>,;|]"
_POSIX_PATH = re.compile(rf"(?<![\w.:/~\\-])(?:file://)?(~?/(?:{_PATH_CHARS}+/*)+)")
_WINDOWS_PATH = re.compile(rf"(?<![\w])(?:[A-Za-z]:[\\/]|\\\\)(?:{_PATH_CHARS}+[\\/]*)+")
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
EXAMPLE_DIR = "/tmp/tiny"  # the README's offline recipe writes the tiny checkpoint there


def _last_component(path: str) -> str:
    parts = [p for p in re.split(r"[\\/]+", path) if p and p != "~"]
    return parts[-1] if parts else "<path>"


def _scrub_posix(match: re.Match[str]) -> str:
    path = match.group(1)
    first = path.lstrip("~/").split("/", 1)[0]
    if not path.startswith("~") and first in _ROUTE_ROOTS:
        return match.group(0)
    if path == EXAMPLE_DIR or path.startswith(EXAMPLE_DIR + "/"):
        return match.group(0)
    return _last_component(path)


def scrub_paths(text: str | None) -> str | None:
    """`text` with every file-system path replaced by its last component (None stays None)."""
    if not text:
        return text
    text = _WINDOWS_PATH.sub(lambda m: _last_component(m.group(0)), text)
    return _POSIX_PATH.sub(_scrub_posix, text)


def _scrub_tree(value: Any) -> Any:
    if isinstance(value, str):
        return scrub_paths(value)
    if isinstance(value, dict):
        return {k: _scrub_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub_tree(v) for v in value]
    return value


def public_checkpoint_name(value: str | None) -> str | None:
    """A Hugging Face repo id as is; anything that is (or may be) a local path as "local checkpoint"."""
    if value is None:
        return None
    if _REPO_ID.match(value) and not os.path.exists(value):
        return value
    return "local checkpoint"


def sanitize_health(health: dict) -> dict:
    """The /health payload with no internal path: checkpoints named by repo id or "local checkpoint",
    every other string scrubbed by `scrub_paths`."""
    out = _scrub_tree(health)
    _name_checkpoints(out, health, ("lm", "codec"))
    config = health.get("config")
    if isinstance(config, dict):  # the configuration's sections name them too
        for section, keys in (("load", ("lm", "codec")), ("server", ("lm_id", "codec_id"))):
            if isinstance(config.get(section), dict):
                _name_checkpoints(out["config"][section], config[section], keys)
    return out


def _name_checkpoints(out: dict, original: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if isinstance(original.get(key), str):
            out[key] = public_checkpoint_name(original[key])


def error_body(message: str, *, error_type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": scrub_paths(message), "type": error_type, "param": param, "code": code}}


def error_response(exc: TTSError) -> JSONResponse:
    status, error_type = http_status(exc)
    headers = {}
    retry_after_s = getattr(exc, "retry_after_s", None)
    if isinstance(exc, QueueFullError) or (retry_after_s is not None and status == 503):
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s or 1.0)))
    elif status >= 500:
        headers["x-should-retry"] = "false"  # e.g. a model that failed to load: the SDKs would retry a 5xx
    body = error_body(exc.message, error_type=error_type, param=exc.param, code=exc.code)
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    param = ".".join(location) or None
    detail = first.get("msg", "invalid value")
    if param is None:
        return f"invalid request body: {detail}; send a JSON object", None
    return f"invalid value for '{param}': {detail}", param


def install_error_handlers(app: FastAPI) -> None:
    """Register handlers so that no route ever answers with a traceback or an internal path."""

    @app.exception_handler(TTSError)
    async def _tts_error(_: Request, exc: TTSError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return JSONResponse(
            error_body(message, error_type="invalid_request_error", param=param, code="invalid_value"),
            status_code=400,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(
            error_body(str(exc.detail), error_type=error_type, code=getattr(exc, "code", None)),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error in request")
        return JSONResponse(
            error_body("internal error; the server log has details", error_type="server_error"),
            status_code=500,
        )
