"""`python -m tts_core serve-web OUT`: a static build served the way its Space serves it.

A standard-library file server that adds the cross-origin isolation headers of the build's Space
front matter (COOP/COEP/CORP) to every response: without them the page gets no
SharedArrayBuffer and onnxruntime-web runs one wasm thread (what plain `python -m http.server`
gives). The tests and the benchmark serve builds through the same handler.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from .web import CROSS_ORIGIN_HEADERS

logger = logging.getLogger(__name__)


class IsolatedHandler(SimpleHTTPRequestHandler):
    """Static files plus the headers of the build's Space front matter."""

    extensions_map: ClassVar[dict[str, str]] = {
        **SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript", ".js": "text/javascript",
        ".wasm": "application/wasm", ".onnx": "application/octet-stream", ".json": "application/json"}

    def end_headers(self) -> None:
        for key, value in CROSS_ORIGIN_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, format: str, *args) -> None:
        logger.debug("%s %s", self.address_string(), format % args)


def _server(directory: Path, host: str, port: int) -> ThreadingHTTPServer:
    if not (Path(directory) / "index.html").is_file():
        raise FileNotFoundError(f"{directory}: no index.html there; give the folder export-web wrote")
    return ThreadingHTTPServer((host, port), functools.partial(IsolatedHandler, directory=str(directory)))


@contextlib.contextmanager
def serve_static(directory: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `directory` on a free port in a background thread; yields the base URL."""
    server = _server(directory, host, 0)
    thread = threading.Thread(target=server.serve_forever, name="static-server", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def serve_forever(directory: Path, host: str, port: int) -> None:
    server = _server(directory, host, port)
    logger.info("serving %s at http://%s:%d/ (cross-origin isolated; Ctrl-C stops)", directory, host,
                server.server_address[1])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
