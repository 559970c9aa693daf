"""The load bench's server with its timeline traced: where a request's time goes under load.

`python -m bench.http.traced -- app.py ...` runs app.py (as `bench/http/load.py --trace`
does) with, from the first request on: `bench.lib.trace.EngineTrace` on the server's engine
(admission waves, LM steps, codec passes, device busy time), per request the times it entered the
route, was submitted, had its first audio from the engine, had its first chunk ready for the
response and had its first bytes handed to the server, and the event loop's lag (how late a 2 ms
timer fires). `GET /_bench/trace?start=&end=` answers the figures of that window (perf_counter
times: one clock for every process of the machine on Linux); the driver's side is `ask`. Tracing
costs a few microseconds per call; compare runs of one record.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import runpy
import sys
import threading
import time

_TICK_S = 0.002


class _Timeline:
    """Per request (perf_counter seconds) and the event loop's lag samples."""

    def __init__(self):
        self.requests: list[dict] = []
        self.lags: list[tuple[float, float]] = []  # (when, how late)
        self.trace = None
        self.lock = threading.Lock()
        self.offset = time.perf_counter() - time.monotonic()  # monotonic -> perf_counter

    def attach(self, synth) -> None:
        """The engine trace, on the first request (the engine is built and compiled by then)."""
        if self.trace is not None:
            return
        from bench.lib.trace import EngineTrace

        self.trace = EngineTrace().attach(synth.engine)
        asyncio.get_running_loop().create_task(self._ticker())

    async def _ticker(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(_TICK_S)
            now = time.perf_counter()
            self.lags.append((now, now - start - _TICK_S))

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()
            self.lags.clear()
        if self.trace is not None:
            self.trace.clear()

    def summary(self, start: float, end: float) -> dict:
        from bench.lib.trace import percentiles as pct
        from bench.lib.trace import summarize

        with self.lock:
            reqs = [r for r in self.requests if start <= r["entered"] <= end]
            lags = [lag for t, lag in self.lags if start <= t <= end]
        first_in = min((r["entered"] for r in reqs), default=start)

        def gaps(a: str, b: str) -> list[float]:
            return [r[b] - r[a] for r in reqs if r.get(a) is not None and r.get(b) is not None]

        out = {
            "requests": len(reqs),
            "entered_after_first_ms": pct([r["entered"] - first_in for r in reqs]),
            "entered_after_window_start_ms": pct([r["entered"] - start for r in reqs]),
            "submitted_after_entered_ms": pct(gaps("entered", "submitted")),
            "engine_first_audio_after_submitted_ms": pct(gaps("submitted", "first_audio")),
            "first_chunk_ready_after_first_audio_ms": pct(gaps("first_audio", "first_ready")),
            "first_bytes_after_first_ready_ms": pct(gaps("first_ready", "first_bytes")),
            "first_bytes_after_entered_ms": pct(gaps("entered", "first_bytes")),
            "loop_lag_ms": pct(lags),
        }
        if self.trace is not None:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
            out["engine"] = summarize(self.trace, start, end)
        return out


TIMELINE = _Timeline()


def install() -> None:
    """Wrap the delivery path's functions (before the routes import them)."""
    from studio.delivery import streaming

    open_stream, chunk_bytes = streaming.open_stream, streaming.chunk_bytes

    @functools.wraps(open_stream)
    async def traced_open(synth, *args, **kwargs):
        entered = time.perf_counter()
        TIMELINE.attach(synth)
        pump, first = await open_stream(synth, *args, **kwargs)
        stream = pump.stream
        row = {"entered": entered, "first_ready": time.perf_counter(),
               "submitted": stream.submitted_at + TIMELINE.offset if stream is not None else None,
               "first_audio": (stream.first_audio_at + TIMELINE.offset
                               if stream is not None and stream.first_audio_at is not None else None)}
        with TIMELINE.lock:
            TIMELINE.requests.append(row)
        pump._trace_row = row
        return pump, first

    async def traced_bytes(pump, *args, **kwargs):
        row = getattr(pump, "_trace_row", None)
        async for data in chunk_bytes(pump, *args, **kwargs):
            if row is not None and "first_bytes" not in row and data:
                row["first_bytes"] = time.perf_counter()
            yield data

    streaming.open_stream, streaming.chunk_bytes = traced_open, traced_bytes


def _add_route() -> None:
    """GET /_bench/trace?start=&end= on the app: the window's figures, then the trace is cleared
    (windows come one after the other); GET /_bench/switch-interval?ms= sets the interpreter's
    thread switch interval (an experiment's variable)."""
    from fastapi.routing import APIRoute

    from studio import app as studio_app

    create_app = studio_app.create_app

    def summary(start: float, end: float) -> dict:
        try:
            return TIMELINE.summary(start, end)
        finally:
            TIMELINE.clear()

    def switch_interval(ms: float) -> dict:
        sys.setswitchinterval(ms / 1000)
        return {"switch_interval_ms": sys.getswitchinterval() * 1000}

    @functools.wraps(create_app)
    def traced_create_app(*args, **kwargs):
        app = create_app(*args, **kwargs)
        for path, endpoint in (("/_bench/trace", summary), ("/_bench/switch-interval", switch_interval)):
            app.router.routes.insert(0, APIRoute(path, endpoint, methods=["GET"]))  # before the page's mount
        return app

    studio_app.create_app = traced_create_app


def ask(url: str, start: float, end: float, timeout_s: float = 60.0) -> dict:
    """(The driver.) The traced server's figures of [start, end] (perf_counter times)."""
    import httpx

    try:
        reply = httpx.get(url + "/_bench/trace", params={"start": start, "end": end}, timeout=timeout_s)
        return reply.json() if reply.status_code == 200 else {"error": f"HTTP {reply.status_code}: {reply.text[:300]}"}
    except httpx.HTTPError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stand-in", default="", metavar="STEP_MS,DECODE_MS", help="on `stand_in.py`'s device")
    p.add_argument("app", nargs=argparse.REMAINDER, help="-- app.py and its flags")
    args = p.parse_args()
    app = args.app[1:] if args.app[:1] == ["--"] else args.app
    if args.stand_in:
        from bench.http.stand_in import install as stand_in

        stand_in(*(float(x) for x in args.stand_in.split(",")), app[app.index("--voices-dir") + 1])
    install()
    _add_route()
    sys.argv = app
    runpy.run_path(app[0], run_name="__main__")


if __name__ == "__main__":
    main()
