"""The web app around one Synthesizer: raw-PCM streaming, health, metrics, preset clips, player, Gradio UI.

`create_app(service, settings)` returns a FastAPI app. Its own routes are declared first and the
page's slot is mounted last at `/`: Gradio's catch-all would shadow any route added after it. The
page is built before serving, or (`python app.py`) once the model is ready and no stream is in
progress, while the API already answers (`page_slot.py`); Gradio is imported only by that build. The
player's static files live under `/player`, never `/static` or `/assets` (Gradio owns those prefixes).

Middlewares, outermost first: request metrics, body limits and deadlines (`guards.py`), CORS,
the Gradio file guard (`gradio_files.py`), then the routes. The server's connection-level limits
(`connections.py`) are uvicorn's part; `main.py` builds it with `app.state.guard_counters`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from tts_core.audio.encoder_pool import EncoderPool

from .agents.router import build_agents_router
from .api.browser_build import MOUNT_PATH, IsolatedStaticFiles, check_build
from .api.docs import install_docs
from .api.metrics import AppMetrics, RequestMetricsMiddleware
from .api.openai_api import build_openai_router
from .api.ops import build_ops_router
from .api.requests import UploadStore
from .api.routes import build_player_router
from .api.voices_api import SavedVoices
from .delivery.results import ResultStore, build_results_router
from .errors import install_error_handlers
from .limits.clip_decode import CLIP_DECODER
from .limits.guards import GuardCounters, install_http_guards
from .limits.page_mount import install_file_guard, upload_disk_bound
from .limits.upload_disk import UploadDiskBound
from .page_slot import PageApp, PageMode, PageRunner, PageSlot
from .service import ServiceState, SynthesizerService
from .settings import ServerSettings, shown
from .zerogpu.relay import PageRelay, ZeroGPUMode

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"


def create_app(service: SynthesizerService, settings: ServerSettings, zerogpu: ZeroGPUMode | None = None, *,
               page: PageMode | str = PageMode.NOW) -> FastAPI:
    """Build the FastAPI app: streaming + helper routes, the OpenAI router, /player, then the page at /.

    With `zerogpu`, the page's audio comes from GPU calls through Gradio events (`zerogpu.py`); its
    page is always built now. `page`: "now" builds the Gradio page before serving, "deferred" once
    the model has settled and no stream is in progress (`app.state.page_runner.served` says when it
    serves), "off" serves no page. `/health` shows `settings` and the page beside the model's config.
    """
    page = PageMode(page)
    if zerogpu is not None and page is not PageMode.NOW:
        raise ValueError("ZeroGPU mode builds its page before serving (page='now'): the page wires the GPU calls")

    # The compressed formats' encoders run in worker processes (`encoder_pool.py`): started with the
    # server, stopped after its last response (uvicorn drains connections before the lifespan ends).
    pool = EncoderPool(settings.encoder_processes) if settings.encoder_processes else None

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        service.start()  # loads in a background thread; the server answers meanwhile
        if pool is not None:
            pool.start()
        try:
            async with runner.running():
                yield
        finally:
            if pool is not None:
                pool.close()
        service.close()

    app = FastAPI(title="MOSS-TTS-Nano Studio", lifespan=lifespan, docs_url=None, redoc_url=None)
    counters = GuardCounters()
    app.state.guard_counters = counters
    disk = upload_disk_bound()
    app.state.upload_disk = disk
    app.state.encoder_pool = pool
    app.state.config = {"server": shown(settings), "page": {"mode": page.value, "zerogpu": zerogpu is not None}}
    metrics = AppMetrics(lambda: _live_values(service, counters, disk, pool))
    app.state.metrics = metrics

    install_error_handlers(app)
    uploads = UploadStore(max_total_bytes=max(256 * 1024 * 1024, 4 * settings.max_upload_bytes))
    app.state.uploads = uploads

    install_docs(app)  # /docs from local files (FastAPI's default loads them from a CDN)
    app.include_router(build_ops_router(service, metrics))
    saved = SavedVoices(service, settings)  # the one view of the voice library, shared by every router
    app.include_router(build_player_router(service, settings, uploads, saved))
    app.include_router(build_openai_router(service, settings, saved))
    app.include_router(build_agents_router(service, settings, saved))  # the voice-agent sockets
    app.state.results = ResultStore()  # the page's recent generations, for download
    app.include_router(build_results_router(app.state.results))
    app.mount("/player", StaticFiles(directory=STATIC_DIR), name="player")
    if settings.browser_build:  # the in-browser engine, isolated for wasm threads
        app.mount(MOUNT_PATH, IsolatedStaticFiles(directory=check_build(settings.browser_build), html=True),
                  name="browser")

    slot = PageSlot(page)
    app.mount("/", slot, name="page")  # last: the page's catch-all
    build = None
    if page is not PageMode.OFF:
        install_file_guard(app, disk)  # the innermost middleware

        def build() -> PageApp:
            return _build_page(app, service, settings, uploads, saved, zerogpu, disk)

    runner = PageRunner(slot, build, wait_turn=service.wait_for_quiet)
    app.state.page_runner = runner
    if page is PageMode.NOW:
        runner.build_now()
    # body-size limits, deadlines and same-origin CORS, for Gradio's routes too
    install_http_guards(app, settings, counters=counters)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)  # outermost: refusals count too
    return app


def _build_page(app: FastAPI, service: SynthesizerService, settings: ServerSettings, uploads: UploadStore,
                saved: SavedVoices, zerogpu: ZeroGPUMode | None, disk: UploadDiskBound) -> PageApp:
    """Import Gradio, build the studio page and its Gradio app (`page_mount.build_page_app`)."""
    import gradio as gr

    from .limits.page_mount import build_page_app
    from .ui import build_ui
    from .ui.layout import page_theme

    relay = (PageRelay(zerogpu, service, settings, uploads, error_types=(gr.Error,), transport="opus")
             if zerogpu else None)
    demo = build_ui(service, settings, uploads, relay, saved)
    head = '<script src="/player/gradio/bridge.js" defer></script>'
    if zerogpu is not None:
        head += ('<script src="/player/zerogpu/bridge-zerogpu.js" defer></script>'
                 '<script src="/player/zerogpu/zerogpu-notice.js" defer></script>')
    private = [p for p in (settings.lm_id, settings.codec_id) if Path(p).exists()]
    built = build_page_app(
        app, demo, disk=disk, private_paths=private, max_file_size=settings.max_upload_bytes, head=head,
        css_paths=[STATIC_DIR / "gradio" / "ui.css"],
        footer_links=["settings"],  # the UI's events are private; /docs documents the HTTP API
        theme=page_theme(),
    )
    app.state.page = demo
    return built


def _live_values(service: SynthesizerService, counters: GuardCounters, disk: UploadDiskBound,
                 pool: EncoderPool | None) -> dict:
    """The scrape-time values of /metrics (see `metrics._Live`)."""
    values = {
        "tts_model_ready": 1.0 if service.state is ServiceState.READY else 0.0,
        "tts_http_connections_open": counters.connections_open,
        "tts_http_connections_peak": counters.connections_peak,
        "tts_http_connection_cap": counters.connection_cap,
        "tts_http_connections_refused": counters.connections_refused,
        "tts_http_head_timeouts": counters.head_timeouts,
        "tts_http_body_timeouts": counters.body_timeouts,
        "tts_http_bodies_too_large": counters.bodies_too_large,
        "tts_http_bodies_busy": counters.bodies_busy,
    }
    if pool is not None:
        encoders = pool.stats()
        values.update({"tts_encoder_processes": encoders.live, "tts_encoder_streams": encoders.open_streams,
                       "tts_encoder_worker_restarts": encoders.restarts})
    else:
        values.update({"tts_encoder_processes": 0, "tts_encoder_streams": 0})
    queued = CLIP_DECODER.pending
    if service.state is ServiceState.READY:
        stats = service.get().stats()
        values.update({"tts_active_streams": stats.active_streams, "tts_stream_slots": stats.max_active_streams,
                       "tts_queue_limit": stats.max_queue, "tts_engine_stalled": float(stats.stalled)})
        if stats.stalled:  # loaded, but its device stopped responding: not serving (engine/stall.py)
            values["tts_model_ready"] = 0.0
        queued += stats.queued
    values["tts_queued_requests"] = queued
    values.update({"tts_gradio_upload_files": disk.last.files, "tts_gradio_upload_bytes": disk.last.bytes,
                   "tts_gradio_upload_evicted_files": disk.evicted_total})
    return values
