"""Owns the app's one Synthesizer: builds it in the background so the server answers at once.

The web routes ask `service.get()`; while the weights download or warm up that raises a 503
error whose message is the current status line, and after a failure it raises the load error.
Status lines and the load error are kept path-free (`scrub_paths`): they reach the page, /health
and error messages; the server log gets them whole.

Start-up work that must not slow a first listener (building the Gradio page, `page_slot.py`:
seconds of interpreter-bound work) waits on `wait_for_quiet`: the model settled (ready or failed),
then the engine's idle signal (`tts_core.engine.idle`: no stream in progress for a while).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from tts_core.engine.idle import QUIET_S
from tts_core.errors import ModelLoadError, TTSError

from .errors import ModelNotReadyError, scrub_paths

if TYPE_CHECKING:
    from tts_core.synthesizer import Synthesizer

# wait_for_quiet: how long a server that never goes quiet delays the waiter at most.
MAX_WAIT_S = 15.0
# ... and how long it waits for the synthesizer's voice warm-up: reading cached voice codes takes well
# under a second; an empty cache's encodes take longer, and parse no source (see wait_for_quiet).
VOICES_WAIT_S = 3.0

logger = logging.getLogger(__name__)


class ServiceState(str, Enum):
    IDLE = "idle"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class SynthesizerService:
    """Lazily built, thread-safe holder of the Synthesizer.

    Args:
        factory: builds the Synthesizer; it receives a `report(status_line)` callback for progress.
    """

    def __init__(self, factory: Callable[[Callable[[str], None]], Synthesizer]):
        self._factory = factory
        self._lock = threading.Lock()
        self._synth: Synthesizer | None = None
        self._state = ServiceState.IDLE
        self._status = "not started"
        self._error: str | None = None
        self._thread: threading.Thread | None = None
        self._settled = threading.Event()  # set once READY or FAILED
        self.started_at = time.monotonic()

    @property
    def state(self) -> ServiceState:
        return self._state

    @property
    def status(self) -> str:
        return self._status

    @property
    def error(self) -> str | None:
        return self._error

    def _report(self, status: str) -> None:
        # Each status line is its own message template: the log-storm filter (logstorm.py) groups
        # records by template, and a start's dozen progress lines are no storm to thin out.
        logger.info("model: " + status.replace("%", "%%"))
        self._status = scrub_paths(status) or ""

    def start(self, *, background: bool = True) -> None:
        """Begin loading (once). With background=False, load in the calling thread."""
        with self._lock:
            if self._state is not ServiceState.IDLE:
                return
            self._state = ServiceState.LOADING
            self._report("loading model weights…")
        if background:
            self._thread = threading.Thread(target=self._load, name="model-loader", daemon=True)
            self._thread.start()
        else:
            self._load()

    def _load(self) -> None:
        try:
            synth = self._factory(self._report)
        except TTSError as exc:
            self._fail(exc.message)
            return
        except Exception as exc:  # any loader failure must reach the page as one clear line
            logger.exception("model load failed")
            self._fail(f"{type(exc).__name__}: {exc}")
            return
        self._synth = synth
        self._state = ServiceState.READY
        self._report("ready")
        self._settled.set()

    def _fail(self, message: str) -> None:
        self._error = scrub_paths(message)
        self._state = ServiceState.FAILED
        self._report(f"failed: {message}")
        self._settled.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until loaded or failed; True when ready."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._state is ServiceState.READY

    def wait_for_quiet(self, *, quiet_s: float = QUIET_S, max_wait_s: float = MAX_WAIT_S) -> None:
        """Block until the model has settled (ready or failed), its background voice warm-up is
        over or `VOICES_WAIT_S` passed (`Synthesizer.voices_warmed`: its reads of cached voice codes
        parse .npy headers with `ast`, which CPython 3.11 does not guard against another thread's
        parsing, and Gradio's import parses hundreds of sources; `page_slot.BUILD_ATTEMPTS`), and
        then no stream has been in progress for `quiet_s`; at most `max_wait_s` after settling."""
        self._settled.wait()
        synth = self._synth
        if synth is None:  # the load failed: nothing will stream
            return
        deadline = time.monotonic() + max_wait_s
        synth.voices_warmed.wait(min(VOICES_WAIT_S, max_wait_s))
        synth.engine.idle.wait_quiet(quiet_s, timeout_s=max(0.0, deadline - time.monotonic()))

    def get(self) -> Synthesizer:
        if self._state is ServiceState.READY and self._synth is not None:
            return self._synth
        if self._state is ServiceState.FAILED:
            raise ModelLoadError(f"the model failed to load: {self._error}")
        raise ModelNotReadyError(f"the model is still loading ({self._status}); try again in a few seconds")

    def close(self) -> None:
        if self._synth is not None:
            self._synth.close()
