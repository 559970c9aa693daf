"""The LM's frame step, plain (eager) against AOTInductor-compiled units, side by side on one device.

    python -m bench.deploy.aoti_step --json bench/results/aoti-step-h200.json     # on a CUDA machine
    python -m bench.deploy.aoti_step --device cpu --frames 4 --repeats 1          # a smoke run here

What ZeroGPU's worker would run (one stream, eager; torch.compile unavailable there): full-size LM
from the real config with random weights, a short greedy run per repeat with each set of units
(`bench.lib.aoti.greedy_run`), interleaved (eager, aoti, eager, aoti, ...) so both see the same
machine. Recorded per dtype: the compile (or cache load) seconds of each unit, the median frame
time of each, their ratio, and whether the greedy codes agree (fp32: expected exactly; bf16: the
share of equal codes is reported). Packages are cached in --cache-dir per GPU architecture.
Blackwell (sm_120, ZeroGPU's cards) needs its own packages: this bench names the architecture it ran
on. Timings are measurements, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.lib.aoti import greedy_run
from bench.lib.args import REPO_ROOT, shared_data_dir
from bench.lib.machine import machine_info
from bench.lib.models import build_random_models
from bench.lib.record import command_line, new_record, write_record
from studio.zerogpu.aoti import build_aoti_units
from tts_core.model import lm_step

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}



def run_dtype(name: str, args: argparse.Namespace, device: torch.device) -> dict:
    lm, _ = build_random_models(args.lm_config, args.codec_config, device, DTYPES[name])
    started = time.perf_counter()
    aoti, report = build_aoti_units(lm, batch=1, device=device, cache_dir=args.cache_dir)
    build_s = time.perf_counter() - started  # the units are compiled side by side: their slowest, not their sum
    eager_s, aoti_s, same, total = [], [], 0, 0
    for _ in range(args.repeats):
        eager_codes, seconds = greedy_run(lm, lm_step.EAGER, args.frames)
        eager_s += seconds[1:]  # the first frame of a run warms caches up
        aoti_codes, seconds = greedy_run(lm, aoti, args.frames)
        aoti_s += seconds[1:]
        same += int((eager_codes == aoti_codes).sum())
        total += eager_codes.numel()
    eager_ms, aoti_ms = 1000 * statistics.median(eager_s), 1000 * statistics.median(aoti_s)
    return {"dtype": name, "arch": report.arch, "units": report.outcome, "unit_seconds": report.seconds,
            "build_s": round(build_s, 3),
            "frame_ms": {"eager": round(eager_ms, 3), "aoti": round(aoti_ms, 3)},
            "speedup": round(eager_ms / aoti_ms, 3), "codes_equal_share": round(same / total, 4),
            "codes_equal": same == total, "frames": args.frames, "repeats": args.repeats}


def main(argv: list[str] | None = None) -> int:
    data = shared_data_dir()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm-config", default=str(data / "hf_checkpoint_meta" / "config.json"))
    parser.add_argument("--codec-config", default=str(data / "codec" / "config.json"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache-dir", type=Path, default=REPO_ROOT / "outputs" / "aoti-cache")
    parser.add_argument("--json", help="write the record here")
    parser.add_argument("--note", action="append")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    runs = [run_dtype(name.strip(), args, device) for name in args.dtypes.split(",") if name.strip()]
    for run in runs:
        print(run)
    record = new_record("aoti_step", args, machine_info([device]),
                        {"weights": "full-size, random weights", "streams": 1, "device": args.device})
    record["args"].pop("cache_dir", None)
    given = argv if argv is not None else sys.argv[1:]
    kept = [a for i, a in enumerate(given)  # the cache folder is a local path: not in the record
            if not a.startswith("--cache-dir") and not (i and given[i - 1] == "--cache-dir")]
    record["command"] = command_line(["bench", *kept])
    record["runs"] = runs
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
