"""HTTP error translation: every failure leaves as OpenAI's error shape, never a stack trace.

`{"error": {"message", "type", "param", "code"}}` with the status of the exception class
(400 bad input, 404 unknown voice, 413 too large, 503 busy + Retry-After).
"""

from __future__ import annotations

import logging
import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .errors import QueueFullError, TTSError

logger = logging.getLogger(__name__)


def error_body(message: str, *, error_type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_response(exc: TTSError) -> JSONResponse:
    headers = {}
    retry_after_s = getattr(exc, "retry_after_s", None)
    if isinstance(exc, QueueFullError) or (retry_after_s is not None and exc.status_code == 503):
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s or 1.0)))
    body = error_body(exc.message, error_type=exc.error_type, param=exc.param, code=exc.code)
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


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
            error_body(str(exc.detail), error_type=error_type),
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
