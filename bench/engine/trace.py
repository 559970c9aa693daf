"""Where the bench's wall time goes: `python -m bench.engine`'s levels, traced.

The same full-size random-weight models, requests and engine as the bench (`bench.engine.levels`),
one warm-up run per level, then `--repeats` traced runs: host spans per thread (admission,
prefills, LM launches and collects, codec decodes, drains, hand-outs, each caller's request
preparation) and, on CUDA, the device's busy time per kind of work from timing events around every
graph replay (`bench/lib/trace.py`). Per level it prints and records: the run's figures as the
bench computes them, then per thread and label the time spent, device busy time per kind and their
union as a share of the wall time, how late the engine noticed each finished LM step, and the
admission waves of the start. The tracing adds a few microseconds per call, so its TTFP and
throughput are a little below the untraced bench's; compare variants within one trace run.

    python -m bench.engine.trace --streams 64,256 --frames 100 --repeats 2 --json outputs/trace.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.engine.levels import (
    WARMUP_FRAMES,
    LevelPlan,
    _requests,
    bench_synthesizer,
    reference_frames_for,
)
from bench.lib.args import default_config_path
from bench.lib.machine import machine_info
from bench.lib.models import build_random_models
from bench.lib.record import new_record, write_record
from bench.lib.streams import run_streams, summarize_run
from bench.lib.trace import EngineTrace, summarize
from tts_core.config import EngineConfig, SamplingParams
from tts_core.devices import configure_cpu_threads, resolve_device, resolve_lm_dtype
from tts_core.engine.engine import Engine
from tts_core.engine.runner_types import build_runner
from tts_core.tokenizer import TextTokenizer


def trace_level(models, device, plan: LevelPlan, tokenizer, context_rows: int, cache_dir: Path,
                gaps_ms: list[float]) -> list[dict]:
    lm, codec = models
    config = EngineConfig(max_active_streams=plan.streams, max_queue=0, max_context_rows=context_rows)
    gc.collect()
    runner = build_runner(lm, codec, num_slots=plan.streams, max_context_rows=context_rows, device=device)
    engine = Engine(runner, config)
    synth = bench_synthesizer(engine, tokenizer, config, lm.config, cache_dir)
    trace = EngineTrace().attach(engine)
    trace.attach_synthesizer(synth)
    out = []
    try:
        run_streams(synth, _requests(plan, -1, min(plan.frames, WARMUP_FRAMES)))
        for run in range(plan.repeats):
            order = gaps_ms if run % 2 == 0 else gaps_ms[::-1]  # neither gap always goes first
            for gap_ms in order:
                trace.clear()
                timings, wall = run_streams(synth, _requests(plan, run, plan.frames), gap_s=gap_ms / 1000)
                ended = time.perf_counter()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                figures = summarize_run(timings, wall)
                out.append({"streams": plan.streams, "run": run, "arrival_gap_ms": gap_ms, **figures,
                            **summarize(trace, ended - wall, ended)})
                print(json.dumps(out[-1]), flush=True)
    finally:
        engine.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prompt-rows", type=int, default=200)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--switch-interval-ms", type=float, default=None)
    parser.add_argument("--arrival-gaps-ms", default="0",
                        help="per run, request i starts i * gap after the first; e.g. '0,4' traces both in turn")
    parser.add_argument("--json")
    parser.add_argument("--note", action="append", default=[])
    args = parser.parse_args()
    if args.switch_interval_ms:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    lm_config = default_config_path("hf_checkpoint_meta", "config.json")
    codec_config = default_config_path("codec", "config.json")
    tokenizer_path = default_config_path("hf_checkpoint_meta", "tokenizer.model")
    if not (lm_config and codec_config and tokenizer_path):
        raise SystemExit("needs the shared data directory ($MOSS_TTS_PARITY_DIR) for the configs and tokenizer")
    device = resolve_device(args.device)
    configure_cpu_threads(device)
    models = build_random_models(lm_config, codec_config, device, resolve_lm_dtype("auto", device))
    tokenizer = TextTokenizer.from_file(tokenizer_path)
    context_rows = EngineConfig().max_context_rows
    levels = []
    with tempfile.TemporaryDirectory(prefix="moss-trace-") as cache:
        probe = bench_synthesizer(None, tokenizer, EngineConfig(), models[0].config, Path(cache))
        ref_frames = reference_frames_for(probe, args.prompt_rows)
        for streams in (int(s) for s in args.streams.split(",")):
            plan = LevelPlan(streams=streams, frames=args.frames, prompt_rows=args.prompt_rows, repeats=args.repeats,
                             ref_frames=ref_frames, cold_voice=False, sampling=SamplingParams(), enforce_eager=False)
            levels.extend(trace_level(models, device, plan, tokenizer, context_rows, Path(cache),
                                      [float(g) for g in args.arrival_gaps_ms.split(",")]))
    record = new_record("engine_trace", args, machine_info([device]),
                        {"switch_interval_ms": round(sys.getswitchinterval() * 1000, 3), "context_rows": context_rows})
    record["runs"] = levels
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
