"""The engine loop: one thread owns the model; `submit` queues a `Stream`, each iteration
schedules (fills free slots), steps (one frame per running stream), decodes and publishes.

A stream's frames are decoded in chunks whose size follows `pacing.decode_count`, on a codec thread
where one pays (`pipeline.py`); on a GPU the next LM step is launched before the last one is read
(`stepping.Lookahead`). Between iterations the thread builds queued streams (`intake.py`) and runs
idle-time work. Cancelled or finished streams leave the batch at once. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable

import numpy as np

from ..config import EngineConfig
from ..devices import available_cpus
from ..errors import EngineStalledError, TTSError
from ..types import NUM_CHANNELS, NUM_CODEBOOKS, SAMPLE_RATE_HZ, SAMPLES_PER_FRAME
from .cuda.static_step import CompileCancelled
from .features import EngineFeatures, resolve_features
from .idle import MAX_DEFER_S, QUIET_S, IdleSignal
from .intake import Intake
from .lookahead import Lookahead
from .pacing import decode_count, playback_lead_s
from .pipeline import CodecPipeline
from .runner_types import Runner
from .scheduler import Scheduler
from .stall import StallWatch
from .stream import Stream, StreamStatus
from .types import EngineStats

logger = logging.getLogger(__name__)


class Engine:
    """Continuous-batching engine around a `runner_types.Runner` (`runner_types.build_runner` picks one).

    Args:
        runner: owns the model, KV cache and codec state for `config.max_active_streams` slots.
        config: limits (slots, queue).
        idle: the signal its streams are counted on (engines of a pool may share one).
    """

    def __init__(self, runner: Runner, config: EngineConfig, *, idle: IdleSignal | None = None):
        self.runner = runner
        self.config = config
        self._scheduler = Scheduler(num_slots=runner.num_slots, max_queue=config.max_queue)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self.idle = idle or IdleSignal()
        self._streams: dict[str, Stream] = {}  # admitted: waiting for a slot or running
        self._live: dict[str, Stream] = {}  # running, in slots
        # Work for idle moments (prefix warm-ups, the compiled step's switch): (work, args, run by then at the latest)
        self._idle_work: deque[tuple[Callable[..., object], tuple, float | None]] = deque()
        self._cancels: set[str] = set()  # stream ids cancelled since the last iteration
        self._intakes: list[Intake] = []  # request queues this thread builds and admits (`intake.py`)
        self._lookahead = Lookahead(runner, self._live)  # the LM steps, one ahead where possible
        self._tick = 0  # LM steps so far: decodes are due on multiples of a stream's budget (`pacing.decode_count`)
        self._stopping = False
        self._stalled: str | None = None  # why the engine gave up on its device (see `stall.py`)
        self._watch = StallWatch(config.stall_timeout_s, self._on_stall)
        pipelined = config.pipeline_codec
        if pipelined is None:  # default: on CUDA (a second stream), on a CPU with a core to spare
            pipelined = runner.device.type == "cuda" or available_cpus() >= 2
        # A readout thread pays only where decodes are asynchronous (CUDA).
        self._pipeline = CodecPipeline(split=runner.device.type == "cuda") if pipelined else None
        # On a GPU a decode overlapping an LM step runs much slower: a first chunk is decoded with the LM paused.
        self._first_chunk_alone = runner.device.type == "cuda"
        self._thread = threading.Thread(target=self._run, name="tts-engine", daemon=True)
        self._thread.start()
        self.intake = Intake(self.admit)  # streams built on this thread (`submit`)
        self.attach_intake(self.intake)
        runner.start(self._wait_until_quiet, self.when_idle)

    # ---- caller side (any thread) -------------------------------------------------------------

    def submit(self, stream: Stream) -> Stream:
        """Queue `stream` (built on this thread if it is not) and return it; refusals and build errors
        end it with that error. Raises at once only when the engine takes nothing any more."""
        self.idle.track(stream)
        try:
            self.intake.submit(stream)
        except BaseException as exc:
            stream.end(StreamStatus.FAILED, exc)
            raise
        return stream

    def admit(self, stream: Stream) -> None:
        """Take a built stream into the queue for a slot (raises QueueFullError when it is full)."""
        with self._wake:
            if self._stalled is not None:
                raise EngineStalledError(self._stalled)
            if self._stopping:
                raise TTSError("the engine is shutting down")
            self._scheduler.add(stream.id)
            self._streams[stream.id] = stream
            self._wake.notify()
        self.idle.track(stream)
        stream.held_by(self._cancel)  # (outside the lock: an earlier cancel calls back at once)

    def warm_prefix(self, rows: np.ndarray) -> None:
        """Queue a prompt prefix [P, 17] whose KV the runner keeps; computed only while idle."""
        self.when_idle(self.runner.warm_prefix, np.asarray(rows, dtype=np.int64))

    def when_idle(self, work: Callable[..., object], *args, within_s: float | None = None) -> None:
        """Run `work(*args)` on this thread at an idle moment, in order (or between two steps once
        `within_s` has passed, on a server that is never idle); errors are logged."""
        due = None if within_s is None else time.monotonic() + within_s
        self._idle_work.append((work, args, due))  # (atomic; the engine takes work under its lock)
        self._notify()

    def attach_intake(self, intake: Intake) -> None:
        """This thread builds and admits `intake`'s requests between iterations (own or a pool's)."""
        with self._wake:
            self._intakes.append(intake)
        intake.attach(self._notify)

    def _notify(self) -> None:
        with self._wake:
            self._wake.notify()

    def _cancel(self, stream: Stream) -> None:
        """(Any thread, through `Stream.cancel`.) End the stream at this thread's next turn."""
        with self._wake:
            self._cancels.add(stream.id)
            self._wake.notify()

    def stats(self) -> EngineStats:
        with self._lock:
            return EngineStats(**self._scheduler.report(), stalled=self._stalled is not None)

    def features(self) -> list[EngineFeatures]:
        return [resolve_features(self.runner, step_ahead=self._lookahead.step_ahead, pipeline=self._pipeline,
                                 engine_prepares=bool(self._intakes))]

    def close(self, timeout_s: float = 5.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self.idle.close()
        self._watch.close()
        self._thread.join(timeout_s)
        if self._pipeline is not None:  # (an engine thread stuck in the device may have the codec thread stuck too)
            self._pipeline.close(wait=not self._thread.is_alive())

    # ---- engine thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            dropped: list[Stream] = []
            with self._wake:
                while not self._stopping and not self._has_work() and not dropped:
                    self._wake.wait()  # woken by a submit, a cancel, idle work or a compiled step ready
                    if self._cancels and not self._live:  # (with streams running, `_iterate` does it)
                        dropped = self._take_cancels()[1]
                if self._stopping or self._stalled is not None:
                    break
                intakes = [intake for intake in self._intakes if intake.waiting]
            for stream in dropped:
                stream.end(StreamStatus.CANCELLED)
            for intake in intakes:  # (outside the lock: what it builds is submitted to this engine too)
                with self._watch.watching():
                    intake.pump()
            with self._wake:
                work = self._idle_work.popleft() if self._idle_work_due() else None
            if work is not None:
                self._settle_quietly()  # (when busy: the step in flight and the codec work first)
                self._sync()
                with self._watch.watching():  # a request arriving now waits for it
                    try:
                        work[0](*work[1])
                    except Exception:  # a warm-up problem must not stop the engine
                        logger.exception("work at an idle moment failed")
                continue
            with self._watch.watching():
                try:
                    self._iterate()
                except Exception as exc:  # a bug must not kill the server: fail the running streams
                    logger.exception("engine iteration failed")
                    self._lookahead.forget()
                    for live in list(self._live.values()):
                        self._fail(live, exc)
        ending = EngineStalledError(self._stalled) if self._stalled else TTSError("the engine was shut down")
        for intake in list(self._intakes):
            intake.detach(self._notify, ending)
        for live in list(self._live.values()):
            self._fail(live, ending)
        for stream in list(self._streams.values()):  # still waiting for a slot
            stream.end(StreamStatus.FAILED, ending)

    def _on_stall(self, ran_s: float) -> None:
        """(Watch thread.) The engine thread is stuck in the device: fail every stream it holds (the
        engine thread may never come back to do it) and refuse new ones."""
        device = "GPU" if self.runner.device.type == "cuda" else "device"
        message = (f"the {device} stopped responding (one engine step ran for {ran_s:.0f} s); the streams in "
                   f"progress were ended. The server must be restarted.")
        with self._wake:
            self._stalled = message
            streams = list(self._streams.values())
            self._wake.notify()
        logger.error("engine stalled: %s; failing %d stream(s)", message, len(streams))
        for stream in streams:
            stream.end(StreamStatus.FAILED, EngineStalledError(message))
        for intake in list(self._intakes):
            intake.detach(self._notify, EngineStalledError(message))

    def _has_work(self) -> bool:
        return bool(self._live or self._scheduler.num_waiting or self._idle_work
                    or any(intake.waiting for intake in self._intakes))

    def _is_idle(self) -> bool:
        return not self._live and not self._scheduler.num_waiting

    def _idle_work_due(self) -> bool:
        """(Lock held.) The oldest idle work may run now: the engine is idle, or its time is up."""
        if not self._idle_work:
            return False
        due = self._idle_work[0][2]
        return self._is_idle() or (due is not None and time.monotonic() >= due)

    def _wait_until_quiet(self) -> None:
        """Called by the background compile before each unit (tracing holds the interpreter lock and
        would starve a stream): returns once no stream has run for QUIET_S, or after MAX_DEFER_S."""
        self.idle.wait_quiet(QUIET_S, timeout_s=MAX_DEFER_S)
        if self._stopping:
            raise CompileCancelled("the engine is shutting down")

    def _take_cancels(self) -> tuple[list[Stream], list[Stream]]:
        """(Lock held.) The cancelled streams: (running, to retire; waiting, dropped from the queue, to
        end outside the lock). Only the cancelled ids are visited, not every stream."""
        running, waiting = [], []
        for stream_id in self._cancels:
            live = self._live.get(stream_id)
            if live is not None:
                running.append(live)
                continue
            stream = self._streams.pop(stream_id, None)
            if stream is None:  # it had finished already
                continue
            self._scheduler.finish(stream_id, cancelled=True)
            waiting.append(stream)
        self._cancels.clear()
        return running, waiting

    def _iterate(self) -> None:
        with self._lock:
            cancelled, dropped = self._take_cancels()
            admitted = self._scheduler.schedule()
        for stream in dropped:
            stream.end(StreamStatus.CANCELLED)
        for live in cancelled:
            self._retire(live, StreamStatus.CANCELLED)
        if admitted:
            self._lookahead.admitted()
        for stream_id, slot in admitted:
            live = self._streams[stream_id]
            live.slot = slot
            live.status = StreamStatus.RUNNING
            self._live[stream_id] = live
            try:
                self.runner.begin_stream(slot, live.sampling, live.seed)
                self._start_segment(live)
            except Exception as exc:
                logger.exception("could not start stream %s", stream_id)
                self._fail(live, exc)
        self._lookahead.generate()
        self._tick += 1
        self._decode_and_publish()
        self._advance_segments()

    def _sync(self) -> None:
        """Wait for pipelined codec work (before touching codec state or emitting in this thread)."""
        if self._pipeline is not None:
            self._pipeline.drain()

    def _start_segment(self, live: Stream) -> None:
        if self._lookahead.covers(live):
            self._lookahead.settle()  # the step in flight still works on the slot's previous segment
        self._sync()  # the segment resets (or primes) the slot's codec state
        segment = live.segment
        self.runner.start_segment(live.slot, segment.rows, segment.prime_codes, segment.prefix_rows)
        live.frames_in_segment = 0
        live.segment_done = False

    def _decode_and_publish(self) -> None:
        now = time.monotonic()
        groups: dict[int, list[Stream]] = defaultdict(list)
        for live in self._live.values():
            if not live.num_pending:
                continue
            if live.segment_done:
                count = live.num_pending  # flush the tail of the segment
            else:
                lead = playback_lead_s(live.handed_samples / SAMPLE_RATE_HZ, live.first_audio_at, now)
                if not (count := decode_count(live.num_pending, lead, self._tick)):
                    continue
            groups[count].append(live)
        for count, lives in groups.items():
            codes = np.stack([live.take_frames(count) for live in lives])  # [B, n, 16]
            last = []
            for live in lives:
                live.handed_samples += count * SAMPLES_PER_FRAME
                last.append(live.segment_done and not live.num_pending and live.is_final_segment)
            first = self._first_chunk_alone and any(live.first_audio_at is None for live in lives)
            if self._pipeline is None or any(last) or first:
                self._sync()  # a stream's last chunk retires it here, after its earlier chunks
                self._decode_group(lives, codes, last)()
            else:
                self._pipeline.push(lambda lives=lives, codes=codes, last=last: self._decode_group(lives, codes, last))

    def _decode_group(self, lives: list[Stream], codes: np.ndarray, last: list[bool]):
        """Queue the group's decode; returns what reads out and emits its audio (pipelined: on a second thread)."""
        pending = self.runner.decode_async([live.slot for live in lives], codes)

        def emit() -> None:
            pcm = pending.result()  # per stream [2, n*3840]
            for i, live in enumerate(lives):
                self._emit(live, pcm[i], codes[i], is_last=last[i])

        return emit

    def _advance_segments(self) -> None:
        for live in list(self._live.values()):
            if not live.segment_done or live.num_pending:
                continue
            self._sync()  # what follows is emitted after the segment's last decoded chunk
            if live.is_final_segment:
                # The segment stopped right after a decode: close the stream with an empty chunk.
                self._emit(live, np.zeros((NUM_CHANNELS, 0), np.float32), _NO_CODES, is_last=True)
                continue
            pause_s = live.segment.pause_after_s
            if pause_s > 0:
                silence = np.zeros((NUM_CHANNELS, round(pause_s * SAMPLE_RATE_HZ)), np.float32)
                live.handed_samples += silence.shape[1]
                self._emit(live, silence, _NO_CODES, is_last=False, is_pause=True)
            live.segment_index += 1
            try:
                self._start_segment(live)
            except Exception as exc:
                logger.exception("could not start segment %d of %s", live.segment_index, live.id)
                self._fail(live, exc)

    def _emit(self, live: Stream, pcm: np.ndarray, codes: np.ndarray, *, is_last: bool,
              is_pause: bool = False) -> None:
        live.push(live.next_chunk(pcm, codes, is_last=is_last, is_pause=is_pause))
        if is_last:
            self._retire(live, StreamStatus.FINISHED)

    def _retire(self, live: Stream, status: StreamStatus, error: BaseException | None = None) -> None:
        if live.id not in self._live:
            return
        self._settle_quietly()  # before the slot is released (the step in flight may cover it)
        self._live.pop(live.id, None)
        self._drain_quietly()  # no decode of this slot may still be running
        self.runner.release(live.slot)
        with self._lock:
            self._scheduler.finish(live.id, cancelled=status is StreamStatus.CANCELLED)
            self._streams.pop(live.id, None)
        live.end(status, error)

    def _settle_quietly(self) -> None:
        try:
            self._lookahead.settle()
        except Exception:  # the iteration that launched it fails its streams; here we only wait
            logger.exception("the LM step in flight failed")

    def _drain_quietly(self) -> None:
        if self._pipeline is None:
            return
        try:
            self._pipeline.drain()
        except Exception:  # the iteration that submitted it fails its streams; here we only wait
            logger.exception("pipelined codec work failed")

    def _fail(self, live: Stream, exc: BaseException) -> None:
        self._drain_quietly()  # chunks decoded before the failure go out first
        self._retire(live, StreamStatus.FAILED, exc)


_NO_CODES = np.zeros((0, NUM_CODEBOOKS), np.int64)
