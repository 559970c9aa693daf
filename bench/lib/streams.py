"""Concurrent `Synthesizer.stream()` calls, timed as their callers see them."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tts_core.types import SAMPLE_RATE_HZ


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """One stream, from the moment its caller called `stream()`."""

    ttfp_s: float  # until the first chunk with audio came out of the iterator
    elapsed_s: float  # until the iterator ended
    audio_s: float  # audio received


def _timed_stream(synth, request) -> StreamTiming:
    started = time.perf_counter()
    first, samples = None, 0
    for chunk in synth.stream(request):
        samples += chunk.pcm.shape[1]
        if first is None and samples:
            first = time.perf_counter() - started
    if first is None:
        raise RuntimeError("a bench stream ended without audio")
    return StreamTiming(ttfp_s=first, elapsed_s=time.perf_counter() - started, audio_s=samples / SAMPLE_RATE_HZ)


def run_streams(synth, requests: Sequence, gap_s: float = 0.0) -> tuple[list[StreamTiming], float]:
    """Start every request at once (one caller thread each), or request i `i * gap_s` after the
    common start (arrivals spread out as an HTTP server's event loop admits them); returns their
    timings and the wall time from the common start to the last stream's end."""
    barrier = threading.Barrier(len(requests) + 1)
    timings: list[StreamTiming | None] = [None] * len(requests)
    errors: list[BaseException] = []

    def caller(index: int) -> None:
        barrier.wait()
        if gap_s:
            time.sleep(index * gap_s)
        try:
            timings[index] = _timed_stream(synth, requests[index])
        except BaseException as exc:  # re-raised in the bench's thread below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,), name=f"bench-caller-{i}") for i in range(len(requests))]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall_s = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} bench stream(s) failed, first: {errors[0]!r}") from errors[0]
    return [t for t in timings if t is not None], wall_s


def summarize_run(timings: list[StreamTiming], wall_s: float) -> dict:
    """One run's figures: TTFP p50/p95 over its streams, per-stream RTF, aggregate x real time."""
    ttfp = np.array([t.ttfp_s for t in timings])
    rtf = [t.elapsed_s / t.audio_s for t in timings]
    return {
        "ttfp_p50_ms": round(1000 * float(np.percentile(ttfp, 50)), 2),
        "ttfp_p95_ms": round(1000 * float(np.percentile(ttfp, 95)), 2),
        "rtf_p50": round(statistics.median(rtf), 4),
        "rtf_max": round(max(rtf), 4),
        "x_realtime": round(sum(t.audio_s for t in timings) / wall_s, 3),
        "audio_s_per_stream": round(statistics.median(t.audio_s for t in timings), 3),
    }


def spread(values: Sequence[float]) -> dict:
    """Median and range of one figure over repeated runs."""
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def summarize_level(runs: list[dict]) -> dict:
    """Per figure, the median and min-max over the runs of one level."""
    keys = [k for k in runs[0] if k != "audio_s_per_stream"]
    return {key: spread([run[key] for run in runs]) for key in keys}
