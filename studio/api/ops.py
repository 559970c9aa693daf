"""What load balancers and operators call: `GET /health` and `GET /metrics`.

`/health` answers 200 only when the model is loaded and serving; while it loads, after it failed,
and after its device stopped responding (`engine/stall.py`), 503 with the same JSON (`status`
"loading" / "failed", the status line, the error) and a Retry-After, so a load balancer keeps
traffic away until the server can answer it.
Checkpoint paths and load errors are sanitized (`sanitize_health`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..errors import sanitize_health
from ..service import ServiceState, SynthesizerService
from .metrics import AppMetrics

LOADING_RETRY_AFTER_S = 5
FAILED_RETRY_AFTER_S = 60
STALLED_MESSAGE = "the device stopped responding; the server must be restarted"


def _encoder_processes(request: Request) -> int:
    """Encoder worker processes configured (0: the formats encode in the server's process)."""
    pool = getattr(request.app.state, "encoder_pool", None)
    return pool.processes if pool is not None else 0


def build_ops_router(service: SynthesizerService, metrics: AppMetrics) -> APIRouter:
    router = APIRouter()

    @router.get("/health", responses={503: {"description": "the model is loading or failed to load"}})
    def health(request: Request) -> JSONResponse:
        out: dict = {"status": service.state.value, "message": service.status, "error": service.error,
                     "encoder_processes": _encoder_processes(request),
                     "config": dict(getattr(request.app.state, "config", {}))}  # the server's sections
        runner = getattr(request.app.state, "page_runner", None)  # the page is built after the model
        if runner is not None:
            out["page"] = runner.slot.state
        if service.state is not ServiceState.READY:
            failed = service.state is ServiceState.FAILED  # a restart is needed: ask again much later
            retry_after = FAILED_RETRY_AFTER_S if failed else LOADING_RETRY_AFTER_S
            return JSONResponse(sanitize_health(out), status_code=503, headers={"Retry-After": str(retry_after)})
        synth = service.get()
        model = synth.health()
        out = {**model, **out, "stats": synth.stats().as_dict(), "config": {**model["config"], **out["config"]}}
        if out.get("stalled"):  # the device stopped finishing work (engine/stall.py): only a restart helps
            out.update(status=ServiceState.FAILED.value, error=STALLED_MESSAGE)
            return JSONResponse(sanitize_health(out), status_code=503,
                                headers={"Retry-After": str(FAILED_RETRY_AFTER_S)})
        return JSONResponse(sanitize_health(out))  # checkpoint paths and load errors never leave the server

    @router.get("/metrics", response_class=Response)
    def prometheus_metrics() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    return router
