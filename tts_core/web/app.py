"""The web app around one Synthesizer: raw-PCM streaming, health, preset clips, player, Gradio UI.

`create_app(service, settings)` returns a FastAPI app. Its own routes are declared first and the
Gradio page is mounted last at `/`, so nothing of ours is shadowed (TOOLCHAIN §3). The player's
static files live under `/player`, never `/static` or `/assets` (Gradio owns those prefixes).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

import gradio as gr
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from .errors import install_error_handlers
from .guards import install_http_guards
from .openai_api import build_openai_router
from .requests import UploadStore
from .results import ResultStore, build_results_router
from .routes import build_player_router
from .service import SynthesizerService
from .settings import ServerSettings
from .ui import build_ui

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"


def create_app(service: SynthesizerService, settings: ServerSettings) -> FastAPI:
    """Build the FastAPI app: streaming + helper routes, the OpenAI router, /player, then Gradio at /."""

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        service.start()  # loads in a background thread; the page is served meanwhile
        yield
        service.close()

    app = FastAPI(title="MOSS-TTS-Nano Studio", lifespan=lifespan)
    install_error_handlers(app)
    install_http_guards(app, settings)  # body-size limits and same-origin CORS, for Gradio's routes too
    uploads = UploadStore(max_total_bytes=max(256 * 1024 * 1024, 4 * settings.max_upload_bytes))
    app.state.uploads = uploads

    app.include_router(build_player_router(service, settings, uploads))
    app.include_router(build_openai_router(service, settings))
    app.state.results = ResultStore()  # the page's recent generations, for download
    app.include_router(build_results_router(app.state.results))
    app.mount("/player", StaticFiles(directory=STATIC_DIR), name="player")

    demo = build_ui(service, settings, uploads)
    return gr.mount_gradio_app(
        app,
        demo,
        path="/",
        head='<script src="/player/bridge.js" defer></script>',
        css_paths=[STATIC_DIR / "ui.css"],
        footer_links=["settings"],  # the UI's events are private; /docs documents the HTTP API
        max_file_size=settings.max_upload_bytes,
        theme=gr.themes.Soft(),
    )
