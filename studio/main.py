"""`main(argv)`: flags → `StudioConfig` (logged) → SynthesizerService → create_app → uvicorn.

Run by `python app.py` (and `scripts/run.sh`). The server is up at once; the model loads
in the service's background thread, so torch is imported off the start-up path, and the Gradio page
is built once the model is ready and no stream is in progress (`page_slot.py`): importing Gradio
beside the engine's load would slow both, and the API's first audio needs neither. ZeroGPU mode
builds its page before serving (it wires the GPU calls).

The uvicorn side of the hardening lives here: the log-storm filter on the log handlers, the
open-file limit raised to its maximum, and uvicorn built by `connections.uvicorn_config` (the
connection cap with a fast 503, request-head deadlines, idle keep-alive; the server's settings).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from tts_core.config import LoadConfig
from tts_core.env import env_flag, env_str
from tts_core.errors import ModelLoadError, TTSError

from .flags import parse_config
from .limits.logstorm import install_log_filters
from .settings import StudioConfig, shown

if TYPE_CHECKING:
    from .zerogpu.relay import ZeroGPUMode

logger = logging.getLogger("moss_tts_app")


# The README's offline recipe ("Run it"), word for word (a test holds them together).
RUN_OFFLINE = ("To run offline: .venv/bin/python -m tts_core make-tiny-checkpoint /tmp/tiny, then "
               "./scripts/run.sh --lm /tmp/tiny/lm --codec /tmp/tiny/codec --voices-dir /tmp/tiny/voices "
               "(a small random model: it babbles, but every part of the app runs).")


def _load_hint(load: LoadConfig, exc: BaseException) -> str:
    """The log's account of an unexpected load failure: names local paths and the exception (clients
    get one short line)."""
    hf_home = env_str("HF_HOME", "~/.cache/huggingface")
    try:
        offline = " HF_HUB_OFFLINE=1 is set, so nothing is downloaded." if env_flag("HF_HUB_OFFLINE") else ""
    except ValueError:  # a malformed value must not hide the load error itself
        offline = ""
    return (f"could not load the model from --lm {load.lm} / --codec {load.codec} "
            f"({type(exc).__name__}: {exc}). Check the network connection to huggingface.co, or that "
            f"HF_HOME ({hf_home}) holds the weights, or pass local directories with --lm and --codec.{offline} "
            f"{RUN_OFFLINE}")


def _from_hub(load: LoadConfig) -> bool:
    """Whether the model comes (in part) from the Hub: then a failure says how to run offline."""
    return not (os.path.isdir(os.path.expanduser(load.lm)) and os.path.isdir(os.path.expanduser(load.codec)))


def make_factory(config: StudioConfig, zerogpu: ZeroGPUMode | None = None):
    """Builds the Synthesizer in the service's loader thread; every failure becomes one clear line.

    ZeroGPU mode: the Synthesizer (API, /api/tts/stream, the page's checks) runs on this process's
    CPU; the GPU workers' copy is read in the main thread before serving (`load_zerogpu_weights`)."""
    load = replace(config.load, device="cpu", devices=None) if zerogpu is not None else config.load

    def factory(report):
        report(f"importing the engine (device {load.device})")
        try:
            from tts_core import Synthesizer  # torch is imported here, off the server's start-up path

            synth = Synthesizer.from_pretrained(load=load, engine_config=config.engine, report=report)
            if zerogpu is not None:  # its GPU copy was placed before serving (`load_zerogpu_weights`)
                synth.info["mode"] = zerogpu.describe()
            return synth
        except ModelLoadError as exc:  # one clause of what happened, then what to do
            logger.error("model load failed: %s", exc.message)
            raise ModelLoadError(exc.message.rstrip(".") + "." + (f" {RUN_OFFLINE}" if _from_hub(load) else "")
                                 ) from None
        except TTSError:
            raise
        except ImportError as exc:
            raise ModelLoadError(f"a runtime dependency is missing ({exc}); run pip install -r requirements.txt") from None
        except Exception as exc:  # network, cache, file or format problem: one line, details at debug level
            from .errors import scrub_paths

            logger.error("%s", _load_hint(load, exc))
            logger.debug("model load failed", exc_info=True)
            raise ModelLoadError(scrub_paths("the server log has the details."
                                             + (f" {RUN_OFFLINE}" if _from_hub(load) else ""))) from None

    return factory


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    config = parse_config(argv, prog)
    if not config.page.zerogpu:  # (ZeroGPU: `spaces` is imported before torch, in `_zerogpu_mode`)
        # Importing torch and the engine is the longest step before the weights can be read: it
        # starts now, beside the web stack's own imports (the loader thread finds it done or waits).
        threading.Thread(target=_import_engine, name="engine-import", daemon=True).start()
    logging.basicConfig(level=config.server.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_filters()
    logger.info("configuration: %s", json.dumps({**asdict(config), "server": shown(config.server)}))

    zerogpu = _zerogpu_mode(config)
    from .service import SynthesizerService

    service = SynthesizerService(make_factory(config, zerogpu))
    # The model starts loading now, in its thread, while the server's routes are built; the page
    # follows the model (ZeroGPU: before serving). The lifespan's start is then a no-op.
    service.start()
    import uvicorn

    from .app import create_app
    from .limits.connections import raise_open_files_limit, uvicorn_config
    from .page_slot import PageMode

    raise_open_files_limit()
    settings, page = config.server, config.page.mode
    logger.info("encoder processes: %d%s", settings.encoder_processes,
                " (mp3/opus/aac/flac encode in worker processes)" if settings.encoder_processes
                else " (every format encodes in the server's process)")
    app = create_app(service, settings, zerogpu, page=page)
    if zerogpu is not None:
        load_zerogpu_weights(config, zerogpu)
        zerogpu.before_serving()
    server = uvicorn_config(app, settings, counters=app.state.guard_counters, log_config=None, access_log=False)
    logger.info("serving on http://%s:%d (model loads in the background%s)", settings.host, settings.port,
                {PageMode.DEFERRED: ", then the page", PageMode.OFF: "; API only, no page"}.get(page, ""))
    uvicorn.Server(server).run()


def _import_engine() -> None:
    try:
        importlib.import_module("tts_core.synthesizer")
    except Exception:
        logger.debug("early engine import failed", exc_info=True)


def _zerogpu_mode(config: StudioConfig) -> ZeroGPUMode | None:
    """ZeroGPU mode's GPU function, made before the page (which wires it) and before serving."""
    if not config.page.zerogpu:
        return None
    if config.load.device not in ("auto", "cpu") or config.load.devices:
        logger.warning("ZeroGPU mode: --device/--devices are ignored; this process stays on the CPU and "
                       "each page generation gets its GPU from a ZeroGPU call")
    from .zerogpu.relay import ZeroGPUMode, disable_spaces_auto_wrap

    disable_spaces_auto_wrap()  # before any Gradio event exists (see the function)
    slots = config.engine.max_active_streams  # page generations at once (None: ZeroGPU mode's default)
    zerogpu = ZeroGPUMode() if slots is None else ZeroGPUMode(concurrency=slots)
    logger.info("ZeroGPU mode (%s): page generations run in GPU worker processes", zerogpu.backend)
    return zerogpu


def load_zerogpu_weights(config: StudioConfig, zerogpu: ZeroGPUMode) -> None:
    """ZeroGPU's documented placement: the GPU workers' copy of the model read and put "on cuda"
    here, in the main thread, before serving (see `studio.zerogpu.worker`). A failure is logged
    with its hint and leaves the page offering the CPU engine (its relay reports the GPU as
    unavailable) rather than stopping the server."""
    started = time.perf_counter()
    try:
        zerogpu.load_weights(config.load.lm, config.load.codec, dtype=config.load.dtype,
                             max_context_rows=config.engine.max_context_rows)
    except Exception as exc:  # the CPU engine's load reports the same problem to clients
        logger.error("ZeroGPU: %s", _load_hint(config.load, exc))
        logger.debug("ZeroGPU weights failed to load", exc_info=True)
        return
    logger.info("ZeroGPU: the model is placed for the GPU workers (%.2f s, main thread, before serving)",
                time.perf_counter() - started)
