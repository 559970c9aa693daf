"""In-process servers of the reliability tests built the way `python app.py` builds its server:
`create_app` under uvicorn with the guarded protocol (`connections.uvicorn_config`), here with
limits small enough to test (a cap of a few dozen connections, deadlines of a second or two)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import uvicorn
from reliability_common import INPROC_MAX_TEXT

from tts_core.web.connections import ConnectionLimits, uvicorn_config


def tiny_service(data_dir: Path, cache_dir: Path, *, max_active: int = 2, max_queue: int = 4):
    """A loaded SynthesizerService over the tiny parity checkpoints (loaded in this thread)."""
    from tts_core.config import EngineConfig
    from tts_core.synthesizer import Synthesizer
    from tts_core.web.service import SynthesizerService

    parity = data_dir / "parity"

    def factory(report):
        return Synthesizer.from_pretrained(
            str(parity / "tiny_lm"), str(parity / "tiny_codec"), device="cpu",
            tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
            voices_dir=str(data_dir / "presets"), cache_dir=cache_dir,
            engine_config=EngineConfig(max_active_streams=max_active, max_queue=max_queue,
                                       max_text_chars=INPROC_MAX_TEXT),
            allow_download=False, warmup=False, report=report,
        )

    service = SynthesizerService(factory)
    service.start(background=False)
    assert service.wait(0), f"tiny model failed to load: {service.error}"
    return service


class GuardedServer:
    """`app` served by uvicorn through `GuardedH11Protocol` on a free 127.0.0.1 port, in a thread."""

    def __init__(self, app, limits: ConnectionLimits):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.limits = limits
        config = uvicorn_config(app, host="127.0.0.1", port=self.port, limits=limits,
                                counters=app.state.guard_counters, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> GuardedServer:
        self._thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self._thread.join(15)
        self._sock.close()
