"""The bench's JSON record (what `scripts/render_figures.py` reads) and its printout."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

SCHEMA = "moss-tts-bench/1"
# Flags whose values are local paths or bookkeeping: left out of the recorded command line.
_UNRECORDED = ("--json", "--note", "--lm-config", "--codec-config", "--tokenizer", "--lm", "--codec", "--voices-dir")


def program_name() -> str:
    """How this process was started: `python -m bench.http.load` for a module, else `python PATH`."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return f"python -m {spec.name.removesuffix('.__main__')}"
    script = Path(sys.argv[0]).resolve()
    return f"python {script.relative_to(Path.cwd()) if script.is_relative_to(Path.cwd()) else script}"


def command_line(argv: list[str], program: str | None = None) -> str:
    """`program ARGS` as it was run (`argv[0]` is the program), without local paths and
    bookkeeping flags; `program` defaults to `program_name()`."""
    kept, skip = [], False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _UNRECORDED:
            skip = "=" not in arg
            continue
        kept.append(arg)
    return " ".join([program or program_name(), *map(shlex.quote, kept)])


def new_record(kind: str, args: argparse.Namespace, machine: dict, setup: dict, program: str | None = None) -> dict:
    """The head of a record: what ran, where, when, with which arguments."""
    recorded_args = {k: v for k, v in vars(args).items() if k not in ("func", "json", "note", "verbose", "command")}
    for key in ("lm_config", "codec_config", "tokenizer", "lm", "codec", "voices_dir"):
        if recorded_args.get(key):
            recorded_args[key] = Path(recorded_args[key]).name
    return {
        "schema": SCHEMA,
        "kind": kind,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command_line(sys.argv, program),
        "machine": machine,
        # Other work on the machine when the run began (1-minute load average vs usable CPUs).
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "args": recorded_args,
        "setup": setup,
        "notes": list(args.note or []),
    }


def write_record(record: dict, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _mid(figure: dict, fmt: str) -> str:
    return f"{figure['median']:{fmt}} ({figure['min']:{fmt}}-{figure['max']:{fmt}})"


def print_record(record: dict) -> None:
    m, s = record["machine"], record["setup"]
    gpus = ", ".join(m["gpus"]) or "no GPU"
    print(f"# {record['date']}: {m['cpu_model']} ({m['usable_cpus']}/{m['logical_cpus']} CPUs, "
          f"{m['torch_threads']} torch threads), {gpus}, torch {m['torch']}")
    print("# " + ", ".join(f"{k} {v}" for k, v in s.items()))
    if record.get("fidelity"):
        print("fidelity vs fp32: " + ", ".join(f"{k} {v:.4g}" for k, v in record["fidelity"].items()))
    for label, comp in record.get("components", {}).items():
        print(f"components ({label}): " + ", ".join(f"{k} {v:.2f}" for k, v in comp.items()))
    print("| mode | streams | TTFP p50 ms | TTFP p95 ms | RTF p50 | RTF max | x realtime | peak MiB | level +MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, rows in record["modes"].items():
        for r in rows:
            mem = r["memory"]
            print(f"| {label} | {r['streams']} | {_mid(r['ttfp_p50_ms'], '.1f')} | {r['ttfp_p95_ms']['median']:.1f} "
                  f"| {_mid(r['rtf_p50'], '.3f')} | {r['rtf_max']['median']:.3f} | {_mid(r['x_realtime'], '.2f')} "
                  f"| {mem['peak_mib']} | {mem['growth_mib']} |")
    modes = record["modes"]
    if "graphed" in modes and "eager" in modes:
        for g, e in zip(modes["graphed"], modes["eager"]):
            print(f"streams {g['streams']}: graphed/eager RTF ratio {g['rtf_p50']['median'] / e['rtf_p50']['median']:.2f}, "
                  f"TTFP ratio {g['ttfp_p50_ms']['median'] / e['ttfp_p50_ms']['median']:.2f}")
