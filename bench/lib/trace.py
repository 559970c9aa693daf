"""Where an engine's wall time goes: host spans per thread and device busy time per CUDA stream.

`EngineTrace.attach(engine)` wraps a few methods of one live engine (instance attributes only: the
class and every other engine stay as they are) so that each call is recorded as a span of its
thread: admission, prefills, LM launches and collects (the wait for a step; on a CPU, whole steps),
codec decodes, drains, chunk hand-outs. On CUDA every graph replay or eager step body of the CUDA graphs
is also bracketed by two timing events on the stream it runs on, so after the run the device's own
busy intervals are known, per kind (LM, codec, prefill), and can be laid beside the host's. Nothing
here changes what the engine computes; the events and the bookkeeping cost a few microseconds per
call, which the summary's figures include.

`summarize` turns one traced run into figures: per thread and label the time spent in spans; device
busy time per kind and their union; how long after the device finished an LM step the engine thread
noticed it (collect returned), which is what the interpreter lock and the host's own work add; and
the admission waves of the run's start (how many streams each iteration admitted, and when).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from tts_core.engine.cuda.static_runner import StaticRunner


@dataclass(slots=True)
class Span:
    thread: str
    label: str
    start_s: float  # time.perf_counter()
    end_s: float
    size: int = 0  # rows (streams) the call worked on


@dataclass(slots=True)
class DeviceSpan:
    """One step body on the device: [start, end] events on the stream it ran on."""

    kind: str  # "lm", "codec", "prefill"
    rows: int
    start: torch.cuda.Event
    end: torch.cuda.Event
    launch: int | None = None  # for "lm": the index of the launch that queued it


@dataclass(slots=True)
class DecodeRecord:
    """One codec decode: where its device work ended (CUDA) and when its audio was read out."""

    device_done: torch.cuda.Event | None = None
    readout_start: float | None = None
    readout_end: float | None = None


@dataclass
class EngineTrace:
    """Spans of one engine's threads and device work (see the module doc)."""

    spans: list[Span] = field(default_factory=list)
    device: list[DeviceSpan] = field(default_factory=list)
    admissions: list[tuple[float, int]] = field(default_factory=list)  # (time, streams admitted)
    collects: list[tuple[int, float, float]] = field(default_factory=list)  # (launch index, entered, returned)
    decodes: list[DecodeRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _origin: tuple[float, torch.cuda.Event] | None = None
    _launches: int = 0
    _ticket_index: dict[int, int] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget what was recorded (between runs; the wrappers stay)."""
        with self._lock:
            self.spans.clear()
            self.device.clear()
            self.admissions.clear()
            self.collects.clear()
            self.decodes.clear()

    # ---- recording -----------------------------------------------------------------------------

    def _span(self, label: str, start: float, size: int = 0) -> None:
        span = Span(threading.current_thread().name, label, start, time.perf_counter(), size)
        with self._lock:
            self.spans.append(span)

    def _timed(self, label: str, fn, size_of=None):
        """`fn` recorded as a span `label`; with `size_of(*args)` (read before the call), its size,
        and calls of size 0 are not recorded."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            size = size_of(*args) if size_of is not None else 0
            if size_of is not None and not size:
                return fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._span(label, start, size)

        return wrapper

    def _device_timed(self, fn, kind_of):
        """`fn` bracketed by timing events on the current stream; `kind_of(*args)` -> (kind, rows),
        read before the call; calls with no rows are not recorded."""

        def wrapper(*args, **kwargs):
            kind, rows = kind_of(*args)
            if not rows:
                return fn(*args, **kwargs)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                return fn(*args, **kwargs)
            finally:
                end.record()
                launch = self._launches - 1 if kind == "lm" else None  # (one engine thread launches)
                with self._lock:
                    self.device.append(DeviceSpan(kind, rows, start, end, launch))

        return wrapper

    def _traced_decode(self, runner):
        """`runner.decode_async` as spans "decode" (queueing it) and "readout" (`.result()`: waiting for
        the audio and copying it out), and, on CUDA, an event where its device work ends."""
        decode_async = runner.decode_async
        codec_stream = getattr(runner, "_codec_stream", None)

        def traced(slots, codes):
            start = time.perf_counter()
            pending = decode_async(slots, codes)
            self._span("decode", start, len(slots))
            record = DecodeRecord()
            if codec_stream is not None:
                record.device_done = torch.cuda.Event(enable_timing=True)
                record.device_done.record(codec_stream)
            with self._lock:
                self.decodes.append(record)
            result = pending.result

            def traced_result():
                record.readout_start = time.perf_counter()
                try:
                    return result()
                finally:
                    record.readout_end = time.perf_counter()
                    self._span("readout", record.readout_start, len(slots))

            pending.result = traced_result
            return pending

        return traced

    def attach_synthesizer(self, synth) -> None:
        """Also record request preparation: its checks (in the caller's thread) and the building of
        its segments (on the engine thread)."""
        build, timed = synth.build, self._timed

        def traced_build(request, **kwargs):
            stream = timed("check", build)(request, **kwargs)
            if stream._build is not None:  # built later, on the engine thread
                stream._build = timed("prepare", stream._build)
            return stream

        synth.build = traced_build

    def attach(self, engine) -> EngineTrace:
        """Wrap `engine`'s methods (and its runner's, graphs' and scheduler's) for this trace."""
        runner = engine.runner
        engine._scheduler = _CountedAdmissions(engine._scheduler, self)
        engine._sync = self._timed("drain", engine._sync)
        engine._emit = self._timed("emit", engine._emit)
        runner.decode_async = self._traced_decode(runner)
        if not isinstance(runner, StaticRunner):  # the CPU's runner: each step runs in `step`
            runner.step = self._timed("step", runner.step, len)
            return self
        launch, collect = runner.launch, runner.collect

        def traced_launch(slots):
            start = time.perf_counter()
            with self._lock:
                index = self._launches
                self._launches += 1
            ticket = launch(slots)
            self._ticket_index[id(ticket)] = index
            self._span("launch", start, len(slots))
            return ticket

        def traced_collect(ticket, keep=None):
            start = time.perf_counter()
            out = collect(ticket, keep)
            end = time.perf_counter()
            index = self._ticket_index.pop(id(ticket), -1)
            with self._lock:
                self.collects.append((index, start, end))
            self._span("collect", start, len(ticket.slots))
            return out

        runner.launch, runner.collect = traced_launch, traced_collect
        prefills = runner.prefills
        if prefills is not None:
            prefills.flush = self._timed("prefill", prefills.flush, lambda *_: len(prefills))
        graphs = runner.graphs
        if runner.device.type == "cuda":
            graphs._run = self._device_timed(graphs._run, lambda kind, bucket, size: (kind, bucket))
            if prefills is not None:
                prefills.flush = self._device_timed(prefills.flush, lambda *_: ("prefill", len(prefills)))
            torch.cuda.synchronize(runner.device)
            origin = torch.cuda.Event(enable_timing=True)
            origin.record()
            torch.cuda.synchronize(runner.device)
            self._origin = (time.perf_counter(), origin)
        return self

    # ---- figures -------------------------------------------------------------------------------

    def host_time(self, event: torch.cuda.Event) -> float | None:
        """When a (completed, timing) event's work ended, on the host's clock."""
        if self._origin is None:
            return None
        host0, origin = self._origin
        return host0 + origin.elapsed_time(event) / 1000

    def device_intervals(self) -> list[tuple[str, int, float, float, int | None]]:
        """(kind, rows, start_s, end_s, launch) per device span on the host's clock (needs a
        synchronised device: call after the run)."""
        if self._origin is None:
            return []
        return [(d.kind, d.rows, self.host_time(d.start), self.host_time(d.end), d.launch) for d in self.device]


class _CountedAdmissions:
    """The engine's scheduler, with each admission's size and time recorded (its class has slots,
    so its method cannot be wrapped in place)."""

    def __init__(self, scheduler, trace: EngineTrace):
        self._scheduler = scheduler
        self._trace = trace

    def schedule(self):
        got = self._scheduler.schedule()
        if got:
            with self._trace._lock:
                self._trace.admissions.append((time.perf_counter(), len(got)))
        return got

    def __getattr__(self, name):
        return getattr(self._scheduler, name)


def _thread_group(name: str) -> str:
    if name == "tts-engine":
        return "engine"
    if name.startswith("tts-codec-out"):
        return "codec-out"
    if name.startswith("tts-codec"):
        return "codec"
    if name.startswith("bench-caller"):
        return "callers"
    return name


def _union_s(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Total length of the union of intervals, clipped to [lo, hi]."""
    total, cursor = 0.0, lo
    for start, end in sorted(intervals):
        start, end = max(start, cursor), min(end, hi)
        if end > start:
            total += end - start
            cursor = end
    return total


def _ms(value: float) -> float:
    return round(1000 * value, 2)


def summarize(trace: EngineTrace, started_s: float, ended_s: float) -> dict:
    """Figures of one traced run between `started_s` and `ended_s` (perf_counter times)."""
    wall = ended_s - started_s
    by_thread: dict[str, dict[str, list[float]]] = {}
    for span in trace.spans:
        if span.end_s < started_s or span.start_s > ended_s:
            continue
        thread = _thread_group(span.thread)
        by_thread.setdefault(thread, {}).setdefault(span.label, []).append(span.end_s - span.start_s)
    host = {thread: {label: {"count": len(v), "total_ms": _ms(sum(v)), "median_ms": round(1000 * float(np.median(v)), 3)}
                     for label, v in sorted(labels.items())} for thread, labels in sorted(by_thread.items())}
    intervals = [i for i in trace.device_intervals() if i[3] >= started_s and i[2] <= ended_s]
    device = {}
    for kind in sorted({i[0] for i in intervals}):
        own = [(i[2], i[3]) for i in intervals if i[0] == kind]
        device[kind] = {"count": len(own), "busy_ms": _ms(_union_s(own, started_s, ended_s)),
                        "median_ms": round(1000 * float(np.median([e - s for s, e in own])), 3)}
    if intervals:
        busy = _union_s([(i[2], i[3]) for i in intervals], started_s, ended_s)
        device["any"] = {"busy_ms": _ms(busy), "share_of_wall": round(busy / wall, 3)}
    # How late the engine thread noticed each LM step's end (collect returned - the device finished).
    lm_end = {i[4]: i[3] for i in intervals if i[0] == "lm" and i[4] is not None}
    lags = [returned - lm_end[index] for index, _, returned in trace.collects
            if index in lm_end and started_s <= returned <= ended_s]
    waited = [returned - entered for index, entered, returned in trace.collects if started_s <= returned <= ended_s]
    admissions = [(round(1000 * (t - started_s), 2), n) for t, n in trace.admissions if started_s <= t <= ended_s]
    # Readouts: how long after the decode's device work ended its audio was out (the copy and the
    # per-stream arrays, plus any wait for the interpreter lock), and how long the readout waited
    # for the device.
    after, waited_device = [], []
    for d in trace.decodes:
        if d.device_done is None or d.readout_end is None or not started_s <= d.readout_end <= ended_s:
            continue
        done = trace.host_time(d.device_done)
        after.append(d.readout_end - max(done, d.readout_start))
        waited_device.append(max(0.0, done - d.readout_start))
    return {
        "wall_ms": _ms(wall), "host": host, "device": device,
        "lm_step_noticed_after_ms": percentiles(lags), "collect_wait_ms": percentiles(waited),
        "admissions_ms_count": admissions,
        "readout_after_device_ms": percentiles(after), "readout_waited_for_device_ms": percentiles(waited_device),
    }


def percentiles(values: list[float]) -> dict | None:
    """Seconds -> {count, p50, p95, max} in milliseconds (None when there are none)."""
    if not values:
        return None
    arr = 1000 * np.asarray(values)
    return {"count": len(values), "p50": round(float(np.percentile(arr, 50)), 3),
            "p95": round(float(np.percentile(arr, 95)), 3), "max": round(float(arr.max()), 3)}
