"""The static build of the tiny checkpoints, and a plain static file server that sends the
cross-origin isolation headers a static Space sends (COOP/COEP: wasm threads need them).

`tiny_build()` exports once per test process (ONNX export takes about a minute here), into a
temporary folder removed at exit; every browser-engine test module shares it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import tempfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from tts_core.export.web import CROSS_ORIGIN_HEADERS

DATA = Path(__file__).resolve().parents[3] / "shared" / "moss_tts_nano_data"


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


@functools.cache
def tiny_build(data_dir: Path) -> Path:
    """`export-web` of the tiny parity checkpoints (fp32), built once per process."""
    from tts_core.export.onnx_export import ExportOptions
    from tts_core.export.web import export_web
    from tts_core.model.codec_loading import load_codec
    from tts_core.model.lm_loading import load_lm

    root = Path(tempfile.mkdtemp(prefix="moss-web-"))
    atexit.register(shutil.rmtree, root, True)
    parity = data_dir / "parity"
    out = root / "site"
    export_web(out, load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec"), codec_dir=parity / "tiny_codec",
               tokenizer=data_dir / "hf_checkpoint_meta" / "tokenizer.model", voices_dir=data_dir / "presets",
               options=ExportOptions(max_rows=1024))
    return out
