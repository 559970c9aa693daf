"""One measured run of `bench/http/load.py`, each side: N listeners over HTTP, or N in-process streams.

`http_run` drives the served app with the client pool (`clients.py`) and returns the run's
figures: what the listeners got (aggregate x real time, TTFB, delivered RTF, underruns of the
playback simulation, errors), what it cost the server (CPU seconds per audio second, split by
thread: `server.cpu_split`; encode seconds from its /metrics) and the clients (their CPU).
`inproc_run` is the same requests through `Synthesizer.stream()` from N threads (with this
process's CPU seconds per audio second: the engine's own cost, beside the server's). Each run
keeps the machine's load average at its start. `holds` says
whether a run meets a listener target (no error, nobody behind real time, no underrun, TTFB p95
within a bound). Figures only: nothing here asserts a timing.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from bench.http.clients import ClientPool, RequestSpec
from bench.http.server import ServedApp, cpu_split
from bench.lib.streams import run_streams, summarize_run


@dataclass(frozen=True, slots=True)
class Target:
    """What every listener of a run must get for the run to hold."""

    ttfb_p95_ms: float = 300.0

    def holds(self, run: dict) -> bool:
        return (run["errors"] == 0 and run["completed"] > 0 and run["underruns"] == 0
                and run["behind_real_time"] == 0 and run["ttfb_p95_ms"] is not None
                and run["ttfb_p95_ms"] <= self.ttfb_p95_ms)


def _delta(after: dict, before: dict, name: str, fmt: str) -> float | None:
    if (name, fmt) not in after:
        return None
    return after[(name, fmt)] - before.get((name, fmt), 0.0)


def _per(value: float | None, audio_s: float, digits: int = 4) -> float | None:
    return round(value / audio_s, digits) if value is not None and audio_s else None


def http_run(app: ServedApp, pool: ClientPool, spec: RequestSpec, streams: int, seed0: int) -> dict:
    """`streams` listeners of `spec` at once; the run's figures (see the module docstring)."""
    app.wait_idle(120)
    load = os.getloadavg()[0]
    before, cpu0 = app.scrape(), app.cpu()
    window = time.perf_counter()
    result = pool.run(spec, [seed0 + i for i in range(streams)])
    window = (window, time.perf_counter())
    app.wait_idle(120)
    time.sleep(0.05)  # the pump threads end just after their streams
    cpu1, after = app.cpu(), app.scrape()
    views = result.views
    audio_s = sum(v["audio_s"] for v in views)
    wall_s = result.wall_s
    split = cpu_split(cpu0, cpu1)
    encode_s = _delta(after, before, "tts_encode_seconds_total", spec.fmt)
    encoded_audio_s = _delta(after, before, "tts_audio_out_seconds_total", spec.fmt)
    ttfb = np.array([v["ttfb_s"] for v in views]) if views else None
    rtf = [v["rtf"] for v in views if v["rtf"] is not None]
    return {
        "completed": len(views), "errors": len(result.errors),
        "first_error": result.errors[0] if result.errors else None,
        "x_realtime": round(audio_s / wall_s, 3) if wall_s else None, "wall_s": round(wall_s, 3),
        "ttfb_p50_ms": round(1000 * float(np.percentile(ttfb, 50)), 1) if views else None,
        "ttfb_p95_ms": round(1000 * float(np.percentile(ttfb, 95)), 1) if views else None,
        "rtf_p50": round(statistics.median(rtf), 4) if rtf else None, "rtf_max": round(max(rtf), 4) if rtf else None,
        "behind_real_time": sum(1 for r in rtf if r > 1.0),
        "underruns": sum(v["underruns"] for v in views),
        "listeners_with_underruns": sum(1 for v in views if v["underruns"]),
        "silence_s": round(sum(v["silence_s"] for v in views), 3),
        "server_cpu_s_per_audio_s": _per(split["total_s"], audio_s),
        "event_loop_s_per_audio_s": _per(split["event_loop_s"], audio_s, 5),
        "pump_threads_s_per_audio_s": _per(split["ended_threads_s"], audio_s, 5),
        "engine_threads_s_per_audio_s": _per(split["other_threads_s"], audio_s, 5),
        "encoder_processes_s_per_audio_s": _per(split["children_s"], audio_s, 5),
        "event_loop_busy": round(split["event_loop_s"] / wall_s, 3) if wall_s else None,
        "server_cores_busy": round(split["total_s"] / wall_s, 3) if wall_s else None,
        "encode_s_per_audio_s": round(encode_s / encoded_audio_s, 5) if encode_s is not None and encoded_audio_s
        else None,
        "client_cpu_s_per_audio_s": _per(result.client_cpu_s, audio_s),
        "client_cores_busy": round(result.client_cpu_s / wall_s, 3) if wall_s else None,
        "client_busiest_process": round(result.busiest_worker, 3),
        "bytes_per_audio_s": round(sum(v["bytes"] for v in views) / audio_s) if audio_s else None,
        "audio_s_per_stream": round(statistics.median(v["audio_s"] for v in views), 3) if views else None,
        "client_loop": result.loop,
        "load_average_1m": round(load, 2),
        "window": window,  # (perf_counter) the clients' run, for a traced server (popped by the bench)
    }


def inproc_run(synth, text: str, streams: int, frames: int, seed0: int) -> dict:
    from tts_core.types import SynthesisRequest

    requests = [SynthesisRequest(text, seed=seed0 + i, max_frames=frames) for i in range(streams)]
    load, cpu = os.getloadavg()[0], time.process_time()
    window = time.perf_counter()
    timings, wall_s = run_streams(synth, requests)
    window = (window, time.perf_counter())
    cpu = time.process_time() - cpu  # this process: the in-process engine and its callers (the clients are others)
    summary = summarize_run(timings, wall_s)
    audio_s = sum(t.audio_s for t in timings)
    return {**summary, "cpu_s_per_audio_s": round(cpu / audio_s, 4) if audio_s else None,
            "load_average_1m": round(load, 2), "window": window}


def median_run(runs: list[dict]) -> dict:
    """Per figure, the median over the repeats (None where a figure was not measured); the run
    holds when every repeat held (`holds` key, when the runs carry it)."""
    out: dict = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        if values:
            out[key] = round(statistics.median(values), 5)
        elif key not in ("holds",):
            out[key] = next((r[key] for r in runs if r.get(key) is not None), None)
    if "holds" in runs[0]:
        out["holds"] = all(r["holds"] for r in runs)
    out["runs"] = len(runs)
    return out
