"""A plain static file server that sends the cross-origin isolation headers a static Space sends
(COOP/COEP: the in-browser engine's wasm threads need them), for the browser-engine bench and tests."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from tts_core.export.web import CROSS_ORIGIN_HEADERS


class IsolatedHandler(SimpleHTTPRequestHandler):
    """Static files plus the headers of the build's Space front matter."""

    extensions_map: ClassVar[dict[str, str]] = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".js": "text/javascript", ".wasm": "application/wasm", ".onnx": "application/octet-stream"}

    def end_headers(self) -> None:
        for key, value in CROSS_ORIGIN_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, format: str, *args) -> None:
        pass


@contextlib.contextmanager
def serve_static(directory: Path) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 (a free port) with COOP/COEP; yields the base URL."""
    handler = functools.partial(IsolatedHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="static-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
