"""The server under load, as its users drive it: `python app.py` and N concurrent OpenAI clients.

Starts `python app.py` (the tiny checkpoints of the shared data on CPU, or with `--checkpoint DIR`
the full-size checkpoints that `python -m tts_core make-random-checkpoint DIR` writes, on
`--device`), with `--max-active-streams` = the largest level so every listener of a level is
generated at once, then per level (N concurrent listeners), side by side in the same minutes:

- the in-process bench: the same requests through `Synthesizer.stream()` from N threads, in this
  process, on an engine of the same model, device and limits (what the engine makes);
- per response format and mode (streamed: `stream_format: "audio"`; whole: one file), N clients
  over real sockets, each reading its response as it comes (what the API delivers): the official
  `openai` SDK, or (`--client httpx`) the same request through httpx's streaming API, from
  `--client-processes` worker processes (`clients.py`), pinned with `--client-cpus` to CPUs
  the server and the in-process engine do not use.

Per request: time to first byte, delivered real-time factor (last byte / audio length) and a
listener who starts at the first playable audio and plays in real time (`bench.lib.playback`:
underruns, seconds of silence). Per run: aggregate x real time, the server's CPU seconds per audio
second split by thread (event loop, stream pumps, engine: `server.py`), its encode seconds per
audio second (from its /metrics), and the clients' own CPU (`runs.py`).

`--encoder-processes 1,0` starts one server per setting of app.py's `--encoder-processes` and runs
every case against each, one after the other within a repeat (the keys get " enc=N"); the server
CPU figures then count the encoder worker processes too (`encoder_processes_s_per_audio_s`).

`--profile 256:mp3` adds runs with py-spy recording the server (`profile.py`: the share of
samples per thread role and the top frames go into the record). `--search-levels` then looks, per
format of `--search-formats`, for the most listeners that hold the target (no error, nobody behind
real time, no underrun, TTFB p95 <= `--ttfb-target-ms`): levels in ascending order until one fails. `--budget-s` stops before a run would start past the
budget; the record is rewritten after every level, so a run cut short keeps what it measured.

The machine may be shared with other work: the record keeps the load average; ratios are only read
between runs of one record. Figures only: nothing here asserts a timing.

    python -m bench.http.load --streams 16,32,64 --formats pcm,mp3,opus,aac --modes stream --frames 75 \
        --repeats 2 --client-processes 2 --no-encoder-check --json bench/results/http-load-cpu.json
    bash bench/http/device_load.sh        # the H200 run (full-size random weights, CUDA)
    python scripts/render_figures.py      # then rewrite docs/SERVING.md
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import httpx

from bench.http.clients import ClientPool, RequestSpec
from bench.http.runs import Target, http_run, inproc_run, median_run
from bench.http.server import ModelFiles, serve, split_cpus
from bench.lib.args import shared_data_dir
from bench.lib.record import command_line, new_record, write_record

logger = logging.getLogger("http_load")
TEXT = ("Streaming speech reaches every listener while it is still being generated, one small piece after "
        "another, and the server keeps up with all of them at once.")
FORMATS = ("pcm", "opus", "mp3", "aac", "flac", "wav")
_LOCAL_PATH_FLAGS = ("--data", "--checkpoint", "--app-log", "--py-spy", "--profile-dir")
APP_LOG_TAIL_BYTES = 4 << 20


def _levels(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


def _without_paths(argv: list[str]) -> list[str]:
    """`argv` without flags whose values are local paths."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _LOCAL_PATH_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f + "=" for f in _LOCAL_PATH_FLAGS)):
            out.append(arg)
    return out


def inproc_synthesizer(files: ModelFiles, device: str, most: int, cache_dir: Path):
    """The in-process twin of the server's engine: same model, device and limits (compiled and
    graphed before it is used, as the server with --no-defer-compile)."""
    from tts_core.config import EngineConfig
    from tts_core.synthesizer import Synthesizer

    return Synthesizer.from_pretrained(
        files.lm, files.codec, device=device, tokenizer=files.tokenizer, voices_dir=files.voices_dir,
        cache_dir=cache_dir, allow_download=False, warmup=device != "cpu",
        engine_config=EngineConfig(max_active_streams=most, max_queue=most, defer_compile=False))


class Bench:
    """One record's runs: the levels, then the search; the record written after each step."""

    def __init__(self, args: argparse.Namespace, record: dict, apps: dict, pool: ClientPool, synth):
        """`apps`: key suffix -> served app ({"": app} for one server; " enc=N" per --encoder-processes)."""
        self.args, self.record, self.apps, self.pool, self.synth = args, record, apps, pool, synth
        self.app = next(iter(apps.values()))  # the profile and the search run on the first
        self.target = Target(args.ttfb_target_ms)
        self.deadline = time.monotonic() + args.budget_s if args.budget_s else None
        self.runs: dict[tuple[int, str], list[dict]] = {}  # (streams, key) -> runs, for the search
        self.inproc_trace = None
        self.switch_intervals = [float(x) for x in args.switch_intervals_ms.split(",") if x] or [None]
        if args.trace:
            from bench.lib.trace import EngineTrace

            self.inproc_trace = EngineTrace().attach(synth.engine)

    def time_left(self) -> bool:
        if self.deadline is None or time.monotonic() < self.deadline:
            return True
        self.record["stopped_by_budget"] = True
        return False

    def save(self) -> None:
        if self.args.json:
            write_record(self.record, self.args.json)

    def spec(self, fmt: str, stream: bool, client: str | None = None, app=None) -> RequestSpec:
        return RequestSpec((app or self.app).url, fmt, stream, self.args.frames, TEXT, client or self.args.client)

    def traced(self, run: dict, app=None) -> dict:
        """`run` with the traced server's (or in-process engine's) timeline of its window (`--trace`)."""
        window = run.pop("window", None)
        if not self.args.trace or window is None:
            return run
        if app is None:  # the in-process engine
            from bench.lib.trace import summarize

            run["trace"] = summarize(self.inproc_trace, *window)
            self.inproc_trace.clear()
            return run
        from bench.http.traced import ask

        run["trace"] = ask(app.url, *window)
        return run

    def http(self, streams: int, key: str, spec: RequestSpec, seed0: int, app=None) -> dict:
        run = self.traced(http_run(app or self.app, self.pool, spec, streams, seed0), app or self.app)
        run["holds"] = self.target.holds(run)
        self.runs.setdefault((streams, key), []).append(run)
        logger.info("%d streams %s: %sx real time, RTF max %s, %d underruns, TTFB p95 %s ms, %d errors, loop %s busy, "
                    "clients %s cores", streams, key, run["x_realtime"], run["rtf_max"], run["underruns"],
                    run["ttfb_p95_ms"], run["errors"], run["event_loop_busy"], run["client_cores_busy"])
        return run

    def level(self, streams: int) -> None:
        args = self.args
        level: dict = {"streams": streams, "inproc": [], "http": {}}
        self.record["levels"].append(level)
        cases = [(f"{fmt}/{mode}{suffix}", self.spec(fmt, mode == "stream", app=app), app)
                 for mode in args.modes.split(",") for fmt in args.formats.split(",")
                 if mode == "stream" or fmt in args.whole_formats.split(",") for suffix, app in self.apps.items()]
        if args.client != "sdk" and streams in _levels(args.sdk_levels):
            cases += [(f"{fmt}/stream/sdk{suffix}", self.spec(fmt, True, "sdk", app), app)
                      for fmt in args.sdk_formats.split(",") for suffix, app in self.apps.items()]
        for repeat in range(args.repeats):
            seed0 = 1000 * repeat
            if not self.time_left():
                break
            level["inproc"].append(self.traced(inproc_run(self.synth, TEXT, streams, args.frames, seed0)))
            for key, spec, app in cases:
                for interval in self.switch_intervals:
                    if not self.time_left():
                        break
                    suffix = ""
                    if interval is not None:
                        httpx.get(app.url + "/_bench/switch-interval", params={"ms": interval}, timeout=10)
                        suffix = f" sw={interval:g}"
                    level["http"].setdefault(key + suffix, []).append(self.http(streams, key, spec, seed0, app))
        level["inproc"] = median_run(level["inproc"]) if level["inproc"] else None
        level["http"] = {key: median_run(runs) for key, runs in level["http"].items()}
        if level["inproc"]:
            logger.info("%d streams in-process: %.1fx real time", streams, level["inproc"]["x_realtime"])
        self.save()

    def profile(self) -> None:
        """Extra runs with py-spy on the server (`--profile`): where its time goes; not in the levels."""
        from bench.http.profile import profiled, summarize

        py_spy = shutil.which(self.args.py_spy or "py-spy")
        self.record["profiles"] = {}
        for item in self.args.profile.split(","):
            streams, fmt = int(item.split(":")[0]), item.split(":")[1]
            key = f"{streams} {fmt}/stream"
            if not py_spy:
                self.record["profiles"][key] = {"skipped": "py-spy not found (--py-spy PATH)"}
                continue
            if not self.time_left():
                break
            path = Path(self.args.profile_dir) / f"server-{streams}-{fmt}.pyspy"
            with profiled(self.app.process.pid, py_spy, path, idle=self.args.profile_idle) as status:
                run = http_run(self.app, self.pool, self.spec(fmt, True), streams, 9000)
            run.pop("window", None)
            entry = {"run": run, "py_spy": status}
            if path.exists():
                entry.update(summarize(path))
            self.record["profiles"][key] = entry
            logger.info("profiled %s: %s", key, entry.get("roles", status))
            self.save()

    def search(self) -> None:
        """Per format, the most listeners that hold the target (ascending levels until one fails)."""
        args = self.args
        found: dict = {"target": {"ttfb_p95_ms": self.target.ttfb_p95_ms, "underruns": 0, "behind_real_time": 0,
                                  "errors": 0}, "client": args.client, "formats": {}}
        self.record["search"] = found
        for fmt in args.search_formats.split(","):
            entry: dict = {"levels": {}, "highest": None, "first_failing": None}
            found["formats"][fmt] = entry
            for streams in sorted(_levels(args.search_levels)):
                runs = self.runs.get((streams, f"{fmt}/stream"), [])
                while len(runs) < args.search_repeats and self.time_left():
                    self.http(streams, f"{fmt}/stream", self.spec(fmt, True), 5000 + 1000 * len(runs))
                    runs = self.runs[(streams, f"{fmt}/stream")]
                if len(runs) < args.search_repeats:
                    entry["stopped"] = "budget"
                    break
                summary = median_run(runs)
                entry["levels"][str(streams)] = summary
                self.save()
                if not summary["holds"]:
                    entry["first_failing"] = streams
                    break
                entry["highest"] = streams
            self.save()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=shared_data_dir(),
                   help="the shared data (tiny checkpoints, tokenizer, preset clips)")
    p.add_argument("--checkpoint", type=Path, help="full-size checkpoints (make-random-checkpoint DIR); default tiny")
    p.add_argument("--device", default=None, help="app.py's --device and the in-process engine's (default: cpu with "
                                                  "the tiny checkpoints, auto with --checkpoint)")
    p.add_argument("--streams", default="1,16,32,64", help="concurrent listeners per level")
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--modes", default="stream,whole", help="stream (stream_format audio) and/or whole")
    p.add_argument("--whole-formats", default="pcm,mp3", help="formats also fetched whole")
    p.add_argument("--frames", type=int, default=100, help="frames per request (80 ms each)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", default="1", help="MOSS_TTS_NUM_THREADS of the app and the in-process engine's torch "
                                                  "threads ('' leaves both at their defaults)")
    p.add_argument("--max-active-streams", type=int, help="the app's slots (default: the largest level)")
    p.add_argument("--encoder-processes", default="", help="app.py --encoder-processes settings, e.g. '1,0': a "
                                                           "server per setting, every case run on each ('': one "
                                                           "server, the app's default)")
    p.add_argument("--server-args", default="", help="extra flags for app.py, e.g. '--no-ui --no-defer-compile'")
    p.add_argument("--client", choices=("sdk", "httpx"), default="sdk")
    p.add_argument("--client-processes", type=int, default=1)
    p.add_argument("--client-cpus", type=int, default=0,
                   help="pin the clients to this process's last N CPUs, the app and the in-process engine to the "
                        "others (0: no pinning)")
    p.add_argument("--sdk-levels", default="", help="with --client httpx: levels also driven by the SDK (parity)")
    p.add_argument("--sdk-formats", default="mp3,pcm")
    p.add_argument("--search-levels", default="", help="levels tried per search format, ascending, until one fails")
    p.add_argument("--search-formats", default="mp3,pcm")
    p.add_argument("--search-repeats", type=int, default=2)
    p.add_argument("--ttfb-target-ms", type=float, default=300.0)
    p.add_argument("--budget-s", type=float, default=0, help="no run starts after this many seconds (0: no limit)")
    p.add_argument("--profile", default="", help="after the levels, extra runs with py-spy on the server, e.g. "
                                                 "'256:mp3,256:pcm' (streams:format)")
    p.add_argument("--py-spy", default=None, help="the py-spy program (default: on PATH)")
    p.add_argument("--profile-dir", default=".", help="where the profiles' raw stacks go")
    p.add_argument("--profile-idle", action=argparse.BooleanOptionalAction, default=False,
                   help="sample waiting threads too (py-spy --idle): where the engine thread waits")
    p.add_argument("--stand-in", default="", metavar="STEP_MS,DECODE_MS",
                   help="run the server and the in-process twin on a stand-in device (`stand_in.py`): LM steps "
                        "ready STEP_MS after launch, decodes DECODE_MS after queueing, real speech audio; the "
                        "host side alone, as on a GPU host ('': the model itself)")
    p.add_argument("--trace", action="store_true",
                   help="trace the server (`traced.py`) and the in-process engine: each run gets its timeline "
                        "(request phases, the event loop's lag, the engine's steps and codec passes)")
    p.add_argument("--switch-intervals-ms", default="", help="with --trace: every case at each of these thread "
                                                            "switch intervals of the server, e.g. '5,0.5' (keys get "
                                                            "' sw=MS')")
    p.add_argument("--encoder-check", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--machine-note", default="other engineers' work ran on the same cores; compare runs of one "
                                             "record only", help="what else ran on the machine (for the record)")
    p.add_argument("--json", default=None)
    p.add_argument("--app-log", default=None, help="keep the end of the app's log here (the work folder is removed)")
    p.add_argument("--note", action="append")
    return p


def main() -> None:
    args = build_parser().parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    started = time.monotonic()
    levels = _levels(args.streams)
    profiled = [int(item.split(":")[0]) for item in args.profile.split(",") if item]
    most = args.max_active_streams or max(levels + _levels(args.search_levels) + profiled)
    server_cpus, client_cpus = split_cpus(args.client_cpus)
    if server_cpus:
        import os

        os.sched_setaffinity(0, server_cpus)  # the in-process engine runs where the app runs
    # Spawned before torch or CUDA start here; they never import either.
    pool = ClientPool(args.client_processes, client_cpus)
    import torch

    from bench.lib.machine import machine_info

    if args.threads:
        torch.set_num_threads(int(args.threads))
    files = ModelFiles.full(args.checkpoint, args.data) if args.checkpoint else ModelFiles.tiny(args.data)
    device = args.device or ("auto" if args.checkpoint else "cpu")
    stand_in = [float(x) for x in args.stand_in.split(",")] if args.stand_in else None
    launcher: tuple[str, ...] = ()
    if stand_in:
        from bench.http.stand_in import install

        install(*stand_in, files.voices_dir)  # the in-process twin's engine
        launcher = ("-m", "bench.http.stand_in", "--step-ms", str(stand_in[0]), "--decode-ms", str(stand_in[1]), "--")
        files = replace(files, label=f"{files.label}, engine on a stand-in device (step {stand_in[0]:g} ms, "
                                     f"decode {stand_in[1]:g} ms)")
    if args.switch_intervals_ms and not args.trace:
        raise SystemExit("--switch-intervals-ms needs --trace (the traced server sets them)")
    if args.trace:
        launcher = ("-m", "bench.http.traced", *(("--stand-in", args.stand_in) if stand_in else ()), "--")
    work = Path(tempfile.mkdtemp(prefix="http-load-"))
    server_args = ("--device", device, *args.server_args.split())
    recorded = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in ("data", "checkpoint", "app_log", "py_spy", "profile_dir")})
    from tts_core.devices import resolve_device

    record = new_record("http_load", recorded, machine_info([resolve_device(device)]), {
        "server": f"python app.py, {files.label}, {device}", "model": files.label, "device": device,
        "max_active_streams": most, "inproc_max_active_streams": max(levels), "threads": args.threads, "frames": args.frames,
        "server_args": " ".join(server_args),
        "encoder_processes": [int(n) for n in args.encoder_processes.split(",") if n] or None,
        "client": {"sdk": "openai.AsyncOpenAI (httpx)", "httpx": "httpx.AsyncClient.stream"}[args.client],
        "client_processes": args.client_processes,
        "cpus": {"server_and_inproc": list(server_cpus) if server_cpus else None,
                 "clients": list(client_cpus) if client_cpus else None},
        "shared_machine": args.machine_note,
        "stand_in": {"step_ms": stand_in[0], "decode_ms": stand_in[1]} if stand_in else None,
    })
    record["command"] = command_line(_without_paths(sys.argv))
    record["complete"] = False
    if args.encoder_check:
        from bench.http.encoders import encoder_check

        record["encoder_check"] = encoder_check(args.data)
    record["levels"] = []
    logger.info("starting app.py (%s, %s) and the in-process engine", files.label, device)
    try:
        with contextlib.ExitStack() as servers:
            settings = record["setup"]["encoder_processes"] or [None]
            apps = {("" if n is None else f" enc={n}"): servers.enter_context(serve(
                files, work / f"app{i}", max_streams=most, threads=args.threads or None, cpus=server_cpus,
                extra_args=server_args + (() if n is None else ("--encoder-processes", str(n))),
                launcher=launcher,
                extra_env={"OMP_WAIT_POLICY": "PASSIVE"} if stand_in else None))
                for i, n in enumerate(settings)}
            synth = inproc_synthesizer(files, device, max(levels), work / "inproc-cache")
            for app in apps.values():
                app.wait_ready(900)
            record["setup"]["startup_s"] = round(time.monotonic() - started, 1)
            logger.info("both ready after %.1f s", time.monotonic() - started)
            bench = Bench(args, record, apps, pool, synth)
            for fmt, app in itertools.product(args.formats.split(","), apps.values()):  # warm-up: first uses
                warm = http_run(app, pool, replace(bench.spec(fmt, True, app=app), frames=10), 2, 10_000)
            record["setup"]["client_loop"] = warm["client_loop"]
            inproc_run(synth, TEXT, 2, 10, 10_000)
            for streams in levels:
                bench.level(streams)
            if args.profile:
                bench.profile()
            if args.search_levels:
                bench.search()
            synth.close()
            record["complete"] = not record.get("stopped_by_budget", False)
            record["setup"]["bench_s"] = round(time.monotonic() - started, 1)
            bench.save()
    finally:
        pool.close()
        if args.app_log and (work / "app0" / "app.log").exists():  # its end: a log per request adds up
            Path(args.app_log).write_bytes((work / "app0" / "app.log").read_bytes()[-APP_LOG_TAIL_BYTES:])
        shutil.rmtree(work, ignore_errors=True)  # the apps' caches, temp files and logs


if __name__ == "__main__":
    main()
