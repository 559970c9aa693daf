"""Reliability figures of the real app (the numbers in docs/RELIABILITY.md), written as a JSON record.

Starts `python app.py` with the tiny checkpoints of the shared data (4 slots + a queue of 12, as
tests/reliability/test_reliability_load.py does), then measures from outside, with psutil: 32 concurrent
clients; a disconnect storm (5 waves of 10 clients leaving mid-stream); 6 clients giving up while
queued; 300 sequential mixed requests after a 30-request warm-up. Resident memory, threads, open
files and temporary files are compared at idle, after idle worker threads are pruned. Then the
hostile clients of issue 14 (`bench/reliability/hardening.py`): a listener's TTFP idle and under the
combined attack, the connection cap, stalled uploads, the worst clip's decode, the disk bounds, a
flood of malformed requests. Takes 4-6 minutes.

    python -m bench.reliability.figures --json bench/results/reliability.json [--note TEXT]
    python scripts/render_figures.py     # then rewrite the tables
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import tempfile
import time
from pathlib import Path

import httpx
import soundfile as sf

from bench.lib import reliability_clients as scenarios
from bench.lib.app import PROC_MAX_ACTIVE, PROC_MAX_QUEUE, AppProc, PeakRss, launch_app
from bench.lib.args import default_config_path
from bench.lib.machine import machine_info
from bench.lib.record import new_record, write_record
from bench.lib.reliability_clients import soak_request
from bench.reliability import hardening
from studio.limits.connections import raise_open_files_limit

THREADS = "1"  # torch threads of the app, as in the tests
SOAK_WARMUP, SOAK_REQUESTS = 30, 300


def clip_b64(data_dir: Path) -> str:
    """A valid 1.5 s reference clip cut from a preset (mono 12 kHz 16-bit WAV), base64."""
    audio, rate = sf.read(data_dir / "presets" / "en_2.wav", dtype="float32", always_2d=True)
    clip = audio[int(0.5 * rate): int(2.0 * rate)].mean(axis=1)[::2]
    out = io.BytesIO()
    sf.write(out, clip, rate // 2, format="WAV", subtype="PCM_16")
    return base64.b64encode(out.getvalue()).decode()


def measure_load(app: AppProc, clients: int = 32) -> dict:
    app.wait_idle()
    started = time.monotonic()
    with PeakRss(app.ps) as peak:
        outcomes = asyncio.run(scenarios.load(app.url, clients))
    seconds = time.monotonic() - started
    app.wait_idle()
    return {"clients": clients, "served": outcomes.count("served"), "refused_503": outcomes.count("refused"),
            "broken": outcomes.count("broken"), "seconds": round(seconds, 2),
            "peak_rss_mib": round(peak.peak_bytes / 2**20, 1)}


def measure_storm(app: AppProc, waves: int = 5, per_wave: int = 10) -> dict:
    base = app.baseline()
    before = app.health()
    started = time.monotonic()
    outcomes = asyncio.run(scenarios.storm(app.url, waves, per_wave))
    seconds = time.monotonic() - started
    right_after = app.snapshot()
    health = app.wait_idle(timeout_s=30)
    after = app.pruned_snapshot()
    return {
        "clients": waves * per_wave, "waves": waves, "aborted_mid_stream": outcomes.count("aborted"),
        "finished_before_abort": outcomes.count("finished"),
        "other": [o for o in outcomes if o not in ("aborted", "finished")],
        "engine_cancelled": health["cancelled"] - before["cancelled"],
        "engine_finished": health["finished"] - before["finished"],
        "active_after": health["active_streams"], "queued_after": health["queued"], "seconds": round(seconds, 2),
        "threads_idle_before": base["threads"], "threads_right_after": right_after["threads"],
        "threads_idle_after": after["threads"], "fds_idle_before": base["fds"], "fds_after": after["fds"],
        "tmp_files_before": base["tmp_files"], "tmp_files_after": after["tmp_files"],
        "rss_mib_before": base["rss_mib"], "rss_mib_after": after["rss_mib"],
    }


def measure_left_while_queued(app: AppProc, impatient: int = 6) -> dict:
    app.wait_idle()
    outcomes, still_queued, cleared_after_s = asyncio.run(
        scenarios.leave_while_queued(app.url, PROC_MAX_ACTIVE, impatient))
    try:
        app.wait_idle(timeout_s=60)
        idle = True
    except AssertionError:
        idle = False
    return {"clients": impatient, "gave_up": outcomes.count("gave up"), "patience_s": scenarios.QUEUE_PATIENCE_S,
            "queued_after_they_left": still_queued, "queue_cleared_after_s": cleared_after_s,
            "engine_idle_afterwards": idle}


def measure_soak(app: AppProc, data_dir: Path) -> dict:
    clip = clip_b64(data_dir)
    counts = {200: 0, 404: 0, 503: 0}
    other: list[int] = []
    with httpx.Client(base_url=app.url, timeout=60) as client:
        for index in range(SOAK_WARMUP):  # every kind of request once or more: caches and pools filled
            soak_request(client, index, clip)
        app.wait_idle()
        before = app.pruned_snapshot()
        started = time.monotonic()
        for index in range(SOAK_WARMUP, SOAK_WARMUP + SOAK_REQUESTS):
            status = soak_request(client, index, clip).status_code
            if status in counts:
                counts[status] += 1
            else:
                other.append(status)
        seconds = time.monotonic() - started
    app.wait_idle()
    after = app.pruned_snapshot()
    return {
        "requests": SOAK_REQUESTS, "warmup": SOAK_WARMUP, "served_200": counts[200], "answered_404": counts[404],
        "refused_503": counts[503], "other_statuses": other, "seconds": round(seconds, 2),
        "rss_mib_before": before["rss_mib"], "rss_mib_after": after["rss_mib"],
        "rss_growth_pct": round(100 * (after["rss_mib"] - before["rss_mib"]) / before["rss_mib"], 2),
        "threads_idle_before": before["threads"], "threads_idle_after": after["threads"],
        "fds_before": before["fds"], "fds_after": after["fds"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability.figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the record to this JSON file")
    parser.add_argument("--note", action="append", default=[], help="a remark stored in the record (repeatable)")
    args = parser.parse_args(argv)
    config = default_config_path("parity", "tiny_lm", "config.json")
    if config is None:
        raise SystemExit("the shared data's parity/tiny_lm was not found: set MOSS_TTS_PARITY_DIR")
    data_dir = Path(config).parents[2]
    machine = {**machine_info([]), "torch_threads": int(THREADS)}  # the app's threads, not this script's
    record = new_record("reliability", args, machine, {
        "checkpoint": "tiny parity checkpoints", "slots": PROC_MAX_ACTIVE, "queue": PROC_MAX_QUEUE, "threads": THREADS})
    raise_open_files_limit()  # this process holds thousands of connections for the cap figure
    with tempfile.TemporaryDirectory(prefix="moss-reliability-") as work, \
            launch_app(data_dir, Path(work), log_path=Path(work) / "app.log", threads=THREADS) as app:
        started = time.monotonic()
        app.wait_ready(300)
        record["setup"]["ready_after_s"] = round(time.monotonic() - started, 1)
        url = app.url
        for name, measure in (
            ("load", lambda: measure_load(app)), ("disconnect_storm", lambda: measure_storm(app)),
            ("left_while_queued", lambda: measure_left_while_queued(app)),
            ("soak", lambda: measure_soak(app, data_dir)),
            ("combined_attack", lambda: hardening.measure_combined_attack(url)),
            ("connection_cap", lambda: hardening.measure_connection_cap(url)),
            ("stalled_uploads", lambda: hardening.measure_stalled(url)),
            ("decode", lambda: hardening.measure_decode(url, app.ps)),
            ("disk", lambda: hardening.measure_disk(url, app.tmp_dir / "gradio", app.cache_dir)),
            ("log_flood", lambda: hardening.measure_log_flood(url, app.log_path)),
        ):
            record[name] = measure()
            print(f"{name}: {record[name]}", flush=True)
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
