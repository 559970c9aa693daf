"""Owns the app's one Synthesizer: builds it in the background so the page is up at once.

The web routes ask `service.get()`; while the weights download or warm up that raises a 503
error whose message is the current status line, and after a failure it raises the load error.
Status lines and the load error are kept path-free (`scrub_paths`): they reach the page, /health
and error messages; the server log gets them whole.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from enum import Enum
from typing import TYPE_CHECKING

from ..errors import ModelLoadError, TTSError
from .errors import ModelNotReadyError, scrub_paths

if TYPE_CHECKING:
    from ..synthesizer import Synthesizer
    from ..types import AudioChunk

StreamObserver = Callable[["Iterator[AudioChunk]"], "Iterator[AudioChunk]"]

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
        self._observer: StreamObserver | None = None
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
        logger.info("model: %s", status)
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

    def _fail(self, message: str) -> None:
        self._error = scrub_paths(message)
        self._state = ServiceState.FAILED
        self._report(f"failed: {message}")

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until loaded or failed; True when ready."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._state is ServiceState.READY

    def observe_streams(self, observer: StreamObserver) -> None:
        """Pass every stream that `get().stream(...)` returns through `observer` (metrics)."""
        self._observer = observer

    def get(self) -> Synthesizer:
        if self._state is ServiceState.READY and self._synth is not None:
            if self._observer is not None:
                return _Observed(self._synth, self._observer)  # type: ignore[return-value]
            return self._synth
        if self._state is ServiceState.FAILED:
            raise ModelLoadError(f"the model failed to load: {self._error}")
        raise ModelNotReadyError(f"the model is still loading ({self._status}); try again in a few seconds")

    def close(self) -> None:
        if self._synth is not None:
            self._synth.close()


class _Observed:
    """The Synthesizer with its streams passed through an observer; everything else delegated."""

    __slots__ = ("_observer", "_synth")

    def __init__(self, synth: Synthesizer, observer: StreamObserver):
        self._synth = synth
        self._observer = observer

    def stream(self, request, *, cancel: threading.Event | None = None) -> Iterator[AudioChunk]:
        return self._observer(self._synth.stream(request, cancel=cancel))

    def __getattr__(self, name: str):
        return getattr(self._synth, name)
