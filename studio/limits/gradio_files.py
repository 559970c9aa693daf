"""Files on the Gradio page: only what Gradio's upload route received, never a path or URL a client names.

`GradioFileGuard`, an ASGI middleware in front of the mount, answers uploads with handles
`gradio-upload/<sha256>/<name>` instead of server paths and maps them back wherever the page sends
them; refuses (400) any event whose `FileData` names a URL, a path outside the upload folder or a
device, before anything is opened or fetched; refuses `GET /gradio_api/file=<url>` (404); and
keeps `UploadDiskBound` informed. Why: docs/RELIABILITY.md, "Security".
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import error_body
from .upload_disk import UploadDiskBound

logger = logging.getLogger(__name__)

API_PREFIX = "/gradio_api"
HANDLE_PREFIX = "gradio-upload/"
_HANDLE = re.compile(r"^gradio-upload/([0-9a-f]{16,128})/([^/\\\x00]{1,255})$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_FILE_ROUTES = (f"{API_PREFIX}/file=", f"{API_PREFIX}/file/")
_REFUSAL = ("file inputs accept only files uploaded to this page (drop or record a clip); "
            "server paths and URLs are refused")


class FileRefused(Exception):
    """A FileData in a request names something other than an upload of this page."""


def is_file_data(value: object) -> bool:
    """Gradio's own test for a file object (a dict with a str `path` and meta `gradio.FileData`)."""
    return (isinstance(value, dict) and isinstance(value.get("path"), str)
            and isinstance(value.get("meta"), dict) and value["meta"].get("_type") == "gradio.FileData")


def _file_data(value: object, depth: int = 0) -> Iterator[dict]:
    if depth > 64:  # Gradio's payloads are a few levels deep; deeper nesting is refused as a whole
        raise FileRefused("request nested too deeply")
    if is_file_data(value):
        yield value  # type: ignore[misc]
    elif isinstance(value, dict):
        for item in value.values():
            yield from _file_data(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _file_data(item, depth + 1)


class UploadPaths:
    """Maps Gradio's upload folder to client handles and back; resolves and checks every path."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(os.path.realpath(folder))

    def handle(self, path: str) -> str:
        """The client's name for an upload path (unchanged when it is not inside the folder)."""
        try:
            relative = Path(os.path.realpath(path)).relative_to(self.folder)
        except ValueError:
            return path
        return HANDLE_PREFIX + relative.as_posix()

    def resolve(self, name: str) -> Path:
        """The upload a handle (or an absolute path inside the folder) names; FileRefused otherwise."""
        match = _HANDLE.match(name)
        if match:
            if match.group(2) in (".", ".."):
                raise FileRefused("bad handle")
            candidate = self.folder / match.group(1) / match.group(2)
        elif os.path.isabs(name) and not _SCHEME.match(name):
            candidate = Path(name)
        else:  # URLs of any scheme, relative paths, Windows and UNC spellings
            raise FileRefused("not an upload")
        real = Path(os.path.realpath(candidate))  # no I/O beyond following links: /dev/zero is never opened
        if real == self.folder or not real.is_relative_to(self.folder):
            raise FileRefused("outside the upload folder")
        return real


class GradioFileGuard:
    """See the module docstring. Wraps the whole app; only touches Gradio's routes."""

    def __init__(self, app: ASGIApp, *, paths: UploadPaths, disk: UploadDiskBound | None = None):
        self.app = app
        self.paths = paths
        self.disk = disk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith(API_PREFIX + "/"):
            await self.app(scope, receive, send)
        elif scope["method"] == "GET" and path.startswith(_FILE_ROUTES):
            await self._file_route(scope, receive, send)
        elif scope["method"] == "POST" and path.rstrip("/") == f"{API_PREFIX}/upload":
            await self._upload(scope, receive, send)
        elif scope["method"] == "POST":
            await self._event(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _file_route(self, scope: Scope, receive: Receive, send: Send) -> None:
        prefix = next(p for p in _FILE_ROUTES if scope["path"].startswith(p))
        name = scope["path"][len(prefix):]
        if _SCHEME.match(name) or name.startswith("//"):  # Gradio would fetch a URL here
            await _send_json(send, 404, error_body("no such file", error_type="invalid_request_error",
                                                   code="not_found"))
            return
        if _HANDLE.match(name):
            try:
                real = self.paths.resolve(name)
            except FileRefused:
                await _send_json(send, 404, error_body("no such file", error_type="invalid_request_error",
                                                       code="not_found"))
                return
            new_path = prefix + str(real)
            scope = {**scope, "path": new_path, "raw_path": new_path.encode("utf-8", "surrogateescape")}
            if self.disk is not None:
                self.disk.touch(real)
        await self.app(scope, receive, send)

    async def _upload(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Gradio's upload answer (a JSON list of absolute paths) with handles instead of paths."""
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewriting_send(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            if start["status"] == 200:
                body = self._handles(body)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, rewriting_send)
        if self.disk is not None:
            await self.disk.sweep_soon()

    def _handles(self, body: bytes) -> bytes:
        try:
            paths = json.loads(body)
        except ValueError:
            return body
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            return body
        if self.disk is not None:
            for path in paths:
                self.disk.touch(Path(path))
        return json.dumps([self.paths.handle(p) for p in paths]).encode()

    async def _event(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check (and rewrite) every FileData of a JSON body before Gradio sees it (the body is read
        whole, within `guards.py`'s limit, and handed on with a corrected Content-Length)."""
        content_type = dict(scope.get("headers", ())).get(b"content-type", b"")
        if not content_type.startswith(b"application/json"):
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            body += message.get("body", b"")
            more = message.get("more_body", False)
        try:
            body = self._checked(body)
        except FileRefused as exc:
            logger.info("refused a page event naming a file that was not uploaded (%s)", exc)
            await _send_json(send, 400, error_body(_REFUSAL, error_type="invalid_request_error",
                                                   code="file_not_uploaded"))
            return
        headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app({**scope, "headers": headers}, replay, send)
        if self.disk is not None:
            await self.disk.sweep_soon()  # the event may have left converted copies in the folder

    def _checked(self, body: bytes) -> bytes:
        if b"FileData" not in body and b"\\u" not in body:  # no file object can be spelled without either
            return body
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return body  # not JSON: Gradio refuses it on its own
        files = list(_file_data(payload))
        if not files:
            return body
        for item in files:
            real = self.paths.resolve(item["path"])
            item["path"] = str(real)
            if self.disk is not None:
                self.disk.touch(real)
        return json.dumps(payload).encode()


async def _send_json(send: Send, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
