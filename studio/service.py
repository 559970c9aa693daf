"""Owns the app's one Synthesizer: builds it in the background so the server answers at once.

The web routes ask `service.get()`; while the weights download or warm up that raises a 503
error whose message is the current status line, and after a failure it raises the load error.
Status lines and the load error are kept path-free (`scrub_paths`): they reach the page, /health
and error messages; the server log gets them whole.

Start-up work that must not slow a first listener (building the Gradio page, `page_slot.py`:
seconds of interpreter-bound work that, on a small CPU, made a stream in progress fall far behind
real time) waits on `wait_for_quiet`: the model settled (ready or failed) and no stream in
progress. A stream counts from `get().stream(...)` until its end, an error or its close.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from enum import Enum
from typing import TYPE_CHECKING

from tts_core.errors import ModelLoadError, TTSError

from .errors import ModelNotReadyError, scrub_paths

if TYPE_CHECKING:
    from tts_core.synthesizer import Synthesizer
    from tts_core.types import AudioChunk

StreamObserver = Callable[["Iterator[AudioChunk]"], "Iterator[AudioChunk]"]
# wait_for_quiet: how long no stream must be in progress, and how long a server that never goes quiet
# delays the waiter at most.
QUIET_S = 1.0
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
        self._observer: StreamObserver | None = None
        self._settled = threading.Event()  # set once READY or FAILED
        self._in_progress: set[int] = set()  # streams handed out and not yet ended or closed (their ids)
        self._waiting_lock = threading.RLock()  # (a watch collected while held calls back in)
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

    def observe_streams(self, observer: StreamObserver) -> None:
        """Pass every stream that `get().stream(...)` returns through `observer` (metrics)."""
        self._observer = observer

    @property
    def streams_in_progress(self) -> int:
        """Streams handed out by `get().stream(...)` that have not ended, failed or been closed."""
        with self._waiting_lock:
            return len(self._in_progress)

    def wait_for_quiet(self, *, quiet_s: float = QUIET_S, max_wait_s: float = MAX_WAIT_S,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> None:
        """Block until the model has settled (ready or failed), its background voice warm-up is
        over or `VOICES_WAIT_S` passed (`Synthesizer.voices_warmed`: its reads of cached voice codes
        parse .npy headers with `ast`, which CPython 3.11 does not guard against another thread's
        parsing, and Gradio's import parses hundreds of sources; `page_slot.BUILD_ATTEMPTS`), and
        then no stream has been in progress for `quiet_s`; at most `max_wait_s` after settling.
        `clock` and `sleep` are for tests."""
        self._settled.wait()
        deadline = clock() + max_wait_s
        warmed = getattr(self._synth, "voices_warmed", None)  # the synthesizer's own start-up work
        voices_deadline = min(deadline, clock() + VOICES_WAIT_S)
        while warmed is not None and not warmed.is_set() and clock() < voices_deadline:
            sleep(0.05)
        quiet_since = None
        while clock() < deadline:
            if self.streams_in_progress:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = clock()
            elif clock() - quiet_since >= quiet_s:
                return
            sleep(0.05)

    def _watch_stream(self, chunks: Iterator[AudioChunk]) -> Iterator[AudioChunk]:
        watch = _StreamWatch(chunks, self._stream_ended)
        with self._waiting_lock:
            self._in_progress.add(id(watch))
        return watch

    def _stream_ended(self, key: int) -> None:
        with self._waiting_lock:
            self._in_progress.discard(key)

    def get(self) -> Synthesizer:
        if self._state is ServiceState.READY and self._synth is not None:
            return _Observed(self._synth, self)  # type: ignore[return-value]
        if self._state is ServiceState.FAILED:
            raise ModelLoadError(f"the model failed to load: {self._error}")
        raise ModelNotReadyError(f"the model is still loading ({self._status}); try again in a few seconds")

    def close(self) -> None:
        if self._synth is not None:
            self._synth.close()


class _Observed:
    """The Synthesizer with its streams passed through the service's observer (metrics) and counted
    while in progress; everything else delegated."""

    __slots__ = ("_service", "_synth")

    def __init__(self, synth: Synthesizer, service: SynthesizerService):
        self._synth = synth
        self._service = service

    def stream(self, request, *, cancel: threading.Event | None = None) -> Iterator[AudioChunk]:
        chunks = self._synth.stream(request, cancel=cancel)
        observer = self._service._observer
        return self._service._watch_stream(observer(chunks) if observer is not None else chunks)

    def __getattr__(self, name: str):
        return getattr(self._synth, name)


class _StreamWatch:
    """Iterates `chunks`; calls `ended(id(self))` once, at the last chunk, the end, an error or
    `close()`. A class rather than a generator: an unstarted generator's cleanup never runs, and a
    stream counts from the moment it is handed out."""

    __slots__ = ("_chunks", "_ended")

    def __init__(self, chunks: Iterator[AudioChunk], ended: Callable[[int], None]):
        self._chunks = chunks
        self._ended: Callable[[int], None] | None = ended

    def __iter__(self) -> _StreamWatch:
        return self

    def __next__(self) -> AudioChunk:
        try:
            chunk = next(self._chunks)
        except BaseException:
            self._finish()
            raise
        if chunk.is_last:
            self._finish()
        return chunk

    def close(self) -> None:
        self._finish()
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()

    def _finish(self) -> None:
        ended, self._ended = self._ended, None
        if ended is not None:
            ended(id(self))

    def __del__(self) -> None:
        self._finish()
