"""The load generator of `bench/http/load.py`: processes of concurrent streamed speech requests.

One asyncio loop reading hundreds of responses at once is itself a single-core program: past a few
dozen raw-PCM listeners it, not the server, would set the pace. `ClientPool` therefore starts P
worker processes (spawned, never forked: the bench process may hold a CUDA context), optionally
pinned to CPUs of their own, and splits every run's requests between them. All workers start their
requests at one moment (a `time.monotonic()` instant sent with the job: one clock for every process
of the machine), read each response as it arrives, and report per request what its listener got
(TTFB, delivered RTF, the playback simulation of `bench.lib.playback`) and their own CPU
seconds during the transfers, so a record shows whether the clients had CPU to spare.

Two clients send the same request:
- `sdk`: the official `openai` SDK (`AsyncOpenAI`, `with_streaming_response`, `iter_bytes`), what
  users run;
- `httpx`: the same POST through httpx's streaming API (`aiter_raw`), the transport the SDK uses,
  without the SDK's per-request work: for the high counts, where that work would load the client.

Workers use uvloop when it is installed (asyncio's loop otherwise; the record says which).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

CLIENTS = ("sdk", "httpx")
START_DELAY_S = 0.5  # from sending a job to its common start: every worker has its clients ready by then
MODEL = "moss-tts-nano"  # 48 kHz stereo in every format (OpenAI's names would make pcm 24 kHz mono)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What every request of one run asks for (each with its own seed)."""

    url: str
    fmt: str
    stream: bool
    frames: int
    text: str
    client: str = "sdk"
    voice: str = "alloy"  # OpenAI's name: the server's default preset speaks

    def body(self, seed: int) -> dict:
        return {"model": MODEL, "voice": self.voice, "input": self.text, "response_format": self.fmt,
                "seed": seed, "max_frames": self.frames, **({"stream_format": "audio"} if self.stream else {})}


@dataclass(frozen=True, slots=True)
class Job:
    spec: RequestSpec
    seeds: tuple[int, ...]
    start_at: float  # time.monotonic() at which the requests start
    timeout_s: float = 600.0


@dataclass
class RunResult:
    """One run over all workers: per request the listener's view (or its error), and the clients' CPU."""

    views: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0  # common start -> the last byte of the last response
    client_cpu_s: float = 0.0  # all workers, during the transfers
    busiest_worker: float = 0.0  # the busiest worker's CPU seconds per wall second (1.0: its loop was saturated)
    workers: int = 0
    loop: str = ""


# ---- one request ----------------------------------------------------------------------------------


async def _sdk_pieces(client, spec: RequestSpec, seed: int) -> AsyncIterator[bytes]:
    body = spec.body(seed)
    extra = {k: v for k, v in body.items() if k not in ("model", "voice", "input", "response_format")}
    async with client.audio.speech.with_streaming_response.create(
            model=body["model"], voice=body["voice"], input=body["input"], response_format=spec.fmt,
            extra_body=extra) as response:
        async for piece in response.iter_bytes():
            yield piece


async def _httpx_pieces(client, spec: RequestSpec, seed: int) -> AsyncIterator[bytes]:
    async with client.stream("POST", spec.url + "/v1/audio/speech", json=spec.body(seed)) as response:
        if response.status_code != 200:
            detail = (await response.aread())[:300].decode(errors="replace")
            raise RuntimeError(f"HTTP {response.status_code}: {detail}")
        async for piece in response.aiter_raw():
            yield piece


async def _one_request(client, spec: RequestSpec, seed: int, start_at: float) -> dict:
    """Arrival times (from this request's start) and bytes; the data itself for compressed formats."""
    pieces = _sdk_pieces if spec.client == "sdk" else _httpx_pieces
    started = time.monotonic()
    arrivals: list[tuple[float, int]] = []
    parts: list[bytes] = []
    total = 0
    try:
        async for piece in pieces(client, spec, seed):
            total += len(piece)
            arrivals.append((time.monotonic() - started, total))
            if spec.fmt not in ("pcm", "wav"):
                parts.append(piece)
    except Exception as exc:  # a refused or broken request is a result of the run, not a bench failure
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    if not arrivals:
        return {"error": "empty response"}
    return {"arrivals": arrivals, "data": b"".join(parts), "bytes": total,
            "start_s": started - start_at, "end_s": started + arrivals[-1][0] - start_at}


def listener_view(fmt: str, result: dict) -> dict:
    """TTFB, delivered RTF and the playback simulation of one finished request."""
    from bench.lib.playback import audio_timeline, simulate_playback

    points = audio_timeline(fmt, result["data"], result["arrivals"])
    play = simulate_playback(points)
    last_s = result["arrivals"][-1][0]
    return {"ttfb_s": result["arrivals"][0][0], "last_byte_s": last_s, "end_s": result["end_s"],
            "audio_s": play.audio_s, "rtf": last_s / play.audio_s if play.audio_s else None,
            "underruns": play.underruns, "silence_s": play.silence_s, "bytes": result["bytes"]}


# ---- one worker process ---------------------------------------------------------------------------


def _client(spec: RequestSpec, streams: int):
    import httpx

    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    http = httpx.AsyncClient(limits=limits, timeout=600)
    if spec.client == "httpx":
        return http
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=spec.url + "/v1", api_key="not-needed", max_retries=0, timeout=600, http_client=http)


async def _drive(job: Job) -> tuple[list[dict], float, float]:
    """(raw results, CPU seconds of this process during the transfers, its wall seconds)."""
    async with _client(job.spec, len(job.seeds)) as client:
        await asyncio.sleep(max(0.0, job.start_at - time.monotonic()))
        cpu0, wall0 = time.process_time(), time.monotonic()
        results = await asyncio.wait_for(
            asyncio.gather(*(_one_request(client, job.spec, seed, job.start_at) for seed in job.seeds)),
            job.timeout_s)
        return list(results), time.process_time() - cpu0, time.monotonic() - wall0


def _loop_factory():
    try:
        import uvloop
    except ImportError:
        return None, "asyncio"
    return uvloop.new_event_loop, "uvloop"


def run_job(job: Job) -> dict:
    """Run one job in this process: the listeners' views, errors and this process's CPU."""
    factory, loop_name = _loop_factory()
    with asyncio.Runner(loop_factory=factory) as runner:
        results, cpu_s, wall_s = runner.run(_drive(job))
    views = [listener_view(job.spec.fmt, r) for r in results if "error" not in r]
    return {"views": views, "errors": [r["error"] for r in results if "error" in r], "cpu_s": cpu_s,
            "wall_s": wall_s, "loop": loop_name}


def _worker(conn, cpus: tuple[int, ...] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            conn.send(("ok", run_job(job)))
        except BaseException as exc:  # reported to the bench, which stops with it
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


# ---- the pool ---------------------------------------------------------------------------------------


class ClientPool:
    """`processes` worker processes, each pinned to `cpus` when given (None: wherever the OS puts them)."""

    def __init__(self, processes: int, cpus: tuple[int, ...] | None = None):
        if processes < 1:
            raise ValueError(f"client processes must be >= 1, got {processes}")
        context = multiprocessing.get_context("spawn")
        self.cpus = cpus
        self._workers = []
        for index in range(processes):
            parent, child = context.Pipe()
            process = context.Process(target=_worker, args=(child, cpus), name=f"http-client-{index}", daemon=True)
            process.start()
            child.close()
            self._workers.append((process, parent))

    @property
    def processes(self) -> int:
        return len(self._workers)

    def run(self, spec: RequestSpec, seeds: list[int], timeout_s: float = 600.0) -> RunResult:
        """Every seed's request at once, spread round-robin over the workers."""
        shares = [tuple(seeds[i::len(self._workers)]) for i in range(len(self._workers))]
        start_at = time.monotonic() + START_DELAY_S
        busy = [(conn, share) for (_, conn), share in zip(self._workers, shares) if share]
        for conn, share in busy:
            conn.send(Job(spec, share, start_at, timeout_s))
        out = RunResult(workers=len(busy))
        for conn, _ in busy:
            status, value = conn.recv()
            if status != "ok":
                raise RuntimeError(f"a client worker failed: {value}")
            out.views += value["views"]
            out.errors += value["errors"]
            out.client_cpu_s += value["cpu_s"]
            out.busiest_worker = max(out.busiest_worker, value["cpu_s"] / max(value["wall_s"], 1e-9))
            out.loop = value["loop"]
        out.wall_s = max((v["end_s"] for v in out.views), default=0.0)
        return out

    def close(self) -> None:
        for _, conn in self._workers:
            with contextlib.suppress(OSError):
                conn.send(None)
        for process, conn in self._workers:
            process.join(10)
            if process.is_alive():
                process.terminate()
            conn.close()
        self._workers = []

    def __enter__(self) -> ClientPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def with_client(spec: RequestSpec, client: str) -> RequestSpec:
    if client not in CLIENTS:
        raise ValueError(f"client must be one of {', '.join(CLIENTS)}, got {client!r}")
    return replace(spec, client=client)
