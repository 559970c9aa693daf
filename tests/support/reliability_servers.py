"""In-process servers of the reliability tests, built the way app.py builds its server
(`GuardedServer`: create_app under uvicorn with the guarded protocol), with limits small enough to
test (a cap of a few dozen connections, deadlines of a second or two). `python app.py` in its own
process is `bench.lib.app.launch_app`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import uvicorn

from studio.limits.connections import uvicorn_config
from studio.settings import ServerSettings
from support.reliability_common import INPROC_MAX_TEXT
from support.server_helpers import ServerThread, tiny_synthesizer_factory


def tiny_service(data_dir: Path, cache_dir: Path, *, max_active: int = 2, max_queue: int = 4):
    """A loaded SynthesizerService over the tiny parity checkpoints (loaded in this thread)."""
    from studio.service import SynthesizerService
    from tts_core.config import EngineConfig

    factory = tiny_synthesizer_factory(data_dir, cache_dir, EngineConfig(
        max_active_streams=max_active, max_queue=max_queue, max_text_chars=INPROC_MAX_TEXT))
    service = SynthesizerService(factory)
    service.start(background=False)
    assert service.wait(0), f"tiny model failed to load: {service.error}"
    return service


class GuardedServer(ServerThread):
    """`app` served by uvicorn through `GuardedH11Protocol` on a free 127.0.0.1 port, in a thread,
    with the connection limits of `settings`."""

    def __init__(self, app, settings: ServerSettings):
        self.settings = settings
        super().__init__(app)

    def config(self, app) -> uvicorn.Config:
        return uvicorn_config(app, replace(self.settings, host="127.0.0.1", port=self.port),
                              counters=app.state.guard_counters, log_level="warning", lifespan="on",
                              timeout_graceful_shutdown=2)
