"""Two checkouts of the server side by side: is a change to the delivery path worth it?

Starts `python app.py` from checkout A (e.g. a `git worktree` of the commit before a change) and
from checkout B (default: this one), both on the tiny checkpoints with the same flags, then for
`--rounds` rounds drives each in turn (A, B, B, A, ... so neither always goes first) with the same
N listeners per format (`runs.http_run`: the same client pool, requests and seeds). The
record keeps every run and, per format, the medians of each side and B / A: the server's CPU
seconds per audio second (all threads; and split: event loop, stream pumps, engine), delivered x
real time, TTFB, underruns. CPU seconds per audio second move less with other work on a shared
machine than wall-clock figures do; the record keeps the load average at the start and end.

    git worktree add /tmp/ab-base <commit>
    python -m bench.http.ab --a /tmp/ab-base --streams 32 --formats mp3,pcm --rounds 6 \
        --label "what B changes" --json bench/results/http-ab-<change>.json
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from bench.http.clients import ClientPool, RequestSpec
from bench.http.load import TEXT
from bench.http.runs import http_run
from bench.http.server import ModelFiles, serve
from bench.lib.args import REPO_ROOT, shared_data_dir
from bench.lib.machine import git_commit
from bench.lib.record import new_record, write_record

logger = logging.getLogger("http_ab")
COMPARED = ("server_cpu_s_per_audio_s", "event_loop_s_per_audio_s", "pump_threads_s_per_audio_s",
            "engine_threads_s_per_audio_s", "x_realtime", "ttfb_p95_ms", "underruns", "rtf_max")


def compare(runs: dict[str, list[dict]]) -> dict:
    """Per figure: the median of each side and B / A."""
    out = {}
    for key in COMPARED:
        a = [r[key] for r in runs["A"] if r.get(key) is not None]
        b = [r[key] for r in runs["B"] if r.get(key) is not None]
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        out[key] = {"A": round(ma, 5), "B": round(mb, 5), "B_over_A": round(mb / ma, 3) if ma else None}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    p.add_argument("--b", type=Path, default=REPO_ROOT, help="checkout B (default: this one)")
    p.add_argument("--label", required=True, help="what B changes against A")
    p.add_argument("--data", type=Path, default=shared_data_dir())
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--formats", default="mp3,pcm")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--frames", type=int, default=75)
    p.add_argument("--threads", default="1")
    p.add_argument("--client", choices=("sdk", "httpx"), default="httpx")
    p.add_argument("--client-processes", type=int, default=1)
    p.add_argument("--server-args", default="")
    p.add_argument("--env-b", action="append", default=[], help="NAME=VALUE for server B only (e.g. PYTHONPATH=...)")
    p.add_argument("--stand-in", default="", metavar="STEP_MS,DECODE_MS",
                   help="both servers' engines on the stand-in device of `stand_in.py` (each checkout must have it)")
    p.add_argument("--json")
    p.add_argument("--note", action="append")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from bench.lib.machine import machine_info

    files = ModelFiles.tiny(args.data)
    launcher: tuple[str, ...] = ()
    if args.stand_in:
        step_ms, decode_ms = (float(x) for x in args.stand_in.split(","))
        launcher = ("-m", "bench.http.stand_in", "--step-ms", str(step_ms), "--decode-ms", str(decode_ms), "--")
        files = replace(files, label=f"{files.label}, engine on a stand-in device (step {step_ms:g} ms, "
                                     f"decode {decode_ms:g} ms)")
    recorded = argparse.Namespace(**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                                     if k not in ("data", "a", "b")})
    record = new_record("http_ab", recorded, machine_info([]), {
        "label": args.label, "A": git_commit(args.a), "B": git_commit(args.b), "streams": args.streams,
        "frames": args.frames, "server": f"python app.py, {files.label}, cpu", "client": args.client,
        "order": "A B B A per pair of rounds"})
    work = Path(tempfile.mkdtemp(prefix="http-ab-"))
    pool = ClientPool(args.client_processes)
    runs: dict[str, dict[str, list[dict]]] = {fmt: {"A": [], "B": []} for fmt in args.formats.split(",")}
    try:
        with ExitStack() as stack:
            apps = {}
            for side, root in (("A", args.a), ("B", args.b)):
                extra_env = dict(item.split("=", 1) for item in args.env_b) if side == "B" else {}
                if launcher:
                    extra_env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                apps[side] = stack.enter_context(serve(
                    files, work / side, max_streams=args.streams, threads=args.threads, cpus=None,
                    extra_args=("--device", "cpu", *args.server_args.split()), root=root.resolve(), extra_env=extra_env,
                    launcher=launcher))
            for app in apps.values():
                app.wait_ready(600)
                for fmt in runs:
                    http_run(app, pool, RequestSpec(app.url, fmt, True, 10, TEXT, args.client), 2, 10_000)
            for rnd in range(args.rounds):
                order = ("A", "B") if rnd % 2 == 0 else ("B", "A")
                for fmt in runs:
                    for side in order:
                        app = apps[side]
                        run = http_run(app, pool, RequestSpec(app.url, fmt, True, args.frames, TEXT, args.client),
                                       args.streams, 1000 * rnd)
                        runs[fmt][side].append(run)
                        logger.info("round %d %s %s: %.4f server CPU s per audio s (loop %.5f, pumps %.5f), %sx, "
                                    "%d underruns", rnd, fmt, side, run["server_cpu_s_per_audio_s"],
                                    run["event_loop_s_per_audio_s"], run["pump_threads_s_per_audio_s"],
                                    run["x_realtime"], run["underruns"])
    finally:
        pool.close()
        shutil.rmtree(work, ignore_errors=True)
    record["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    record["formats"] = {fmt: {"compare": compare(sides), "runs": sides} for fmt, sides in runs.items()}
    for fmt, entry in record["formats"].items():
        logger.info("%s: %s", fmt, {k: v["B_over_A"] for k, v in entry["compare"].items()})
    if args.json:
        write_record(record, args.json)


if __name__ == "__main__":
    main()
