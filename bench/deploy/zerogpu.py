"""The ZeroGPU harness with a real GPU: full-size random weights, the page's GPU path, TTFP per call.

    python -m bench.deploy.zerogpu --json bench/results/zerogpu-h200.json    # on a CUDA machine (~1 min)

What the app does in ZeroGPU mode, minus Gradio: this process builds the full-size models from the
real configs with random weights on its CPU (`GPUWeights`) and never touches CUDA; each call of the
decorated generator (`make_gpu_stream` + `harness.GPU`) runs in a forked worker.
`--placement module` (default, the documented pattern) places the weights "on cuda" here and the
harness moves them to the worker's GPU before its call; `--placement in-call` leaves them on the CPU
and the worker moves them inside its first call. Either way the first call pays the worker start
(fork, CUDA initialisation, weights to the GPU, first kernels; the move's bytes and seconds are
recorded per call); later calls reuse the idle worker, as ZeroGPU does. `--aoti-dir` runs the
worker's LM step as AOTInductor packages (compiled in the first call when the folder has none).
TTFP is from the call to the first chunk with audio, RTF the call's time over the audio length
(`--frames` frames, a 200-row voice-clone prompt).

Checked, not only timed: this process has not initialised CUDA after the calls, and (where
nvidia-smi lists compute processes) only the worker holds a CUDA context. It exits 1 if either
fails. Without CUDA the worker runs on the CPU (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# Nothing here may initialise CUDA; this keeps even torch.cuda.is_available() off the driver.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import torch

from bench.lib.args import shared_data_dir
from bench.lib.machine import machine_info_without_cuda
from bench.lib.models import build_random_models, make_prompt
from bench.lib.record import new_record, write_record
from studio.zerogpu.harness import GPU, parent_cuda_initialized
from studio.zerogpu.worker import GPUWeights, make_gpu_stream, place_weights
from tts_core.config import SamplingParams
from tts_core.engine.stream import Segment, Stream


def one_call(stream, job: Stream) -> dict:
    started = time.monotonic()
    first, samples, chunks = None, 0, 0
    for chunk in stream(job):
        chunks += 1
        if chunk.pcm.shape[1] and first is None:
            first = time.monotonic() - started
        samples += chunk.pcm.shape[1]
    elapsed = time.monotonic() - started
    audio_s = samples / 48_000
    return {"ttfp_ms": round(1000 * first, 1) if first is not None else None, "elapsed_s": round(elapsed, 3),
            "audio_s": round(audio_s, 3), "rtf": round(elapsed / audio_s, 4) if audio_s else None,
            "chunks": chunks, "worker_pid": stream.calls[-1].worker_pid, "duration_asked_s": stream.calls[-1].duration_s,
            "held_s": round(stream.usage[-1].used_s, 3), "moved_bytes": stream.usage[-1].moved_bytes,
            "move_s": round(stream.usage[-1].move_s, 4)}


def cuda_processes() -> list[int] | None:
    """PIDs holding a CUDA context, per nvidia-smi (None when it cannot tell)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [int(line) for line in out.split() if line.strip().isdigit()]


def summary(runs: list[dict], key: str) -> dict | None:
    values = [r[key] for r in runs if r[key] is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    data = shared_data_dir()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm-config", default=str(data / "hf_checkpoint_meta" / "config.json"))
    parser.add_argument("--codec-config", default=str(data / "codec" / "config.json"))
    parser.add_argument("--frames", type=int, default=100, help="frames per call (80 ms each)")
    parser.add_argument("--repeats", type=int, default=3, help="calls after the first (warm worker)")
    parser.add_argument("--placement", choices=["module", "in-call"], default="module",
                        help="module: the documented module-level placement (moved by the harness before the "
                             "call, as spaces does); in-call: the worker moves the weights itself in its first call")
    parser.add_argument("--aoti-dir", help="cache folder of AOTInductor packages: the worker's LM step runs them")
    parser.add_argument("--json", help="write the record here")
    parser.add_argument("--note", action="append")
    args = parser.parse_args(argv)

    started = time.monotonic()
    lm, codec = build_random_models(args.lm_config, args.codec_config, torch.device("cpu"), torch.float32)
    weights = GPUWeights(lm=lm, codec=codec, dtype="auto", aoti_dir=args.aoti_dir)
    if args.placement == "module":
        place_weights(weights, "harness")
    stream = make_gpu_stream(lambda: weights, GPU)
    prompt = make_prompt(lm.config, 200)
    print(f"models built on the CPU in {time.monotonic() - started:.1f} s", file=sys.stderr)

    runs = []
    for index in range(1 + args.repeats):
        segment = Segment(rows=prompt, max_frames=args.frames, estimated_frames=args.frames)
        job = Stream(segments=(segment,), sampling=SamplingParams(), seed=index,
                        submitted_at=time.monotonic())
        run = {"call": index, "worker": "cold" if index == 0 else "warm", **one_call(stream, job)}
        runs.append(run)
        print(json.dumps(run), file=sys.stderr)

    holders = cuda_processes()
    worker_pids = sorted({r["worker_pid"] for r in runs})
    checks = {
        "parent_cuda_initialized": parent_cuda_initialized(),
        "parent_holds_cuda_context": None if holders is None else os.getpid() in holders,
        "worker_holds_cuda_context": None if holders is None else any(pid in holders for pid in worker_pids),
        "workers": len(worker_pids),
    }
    stream.close_workers()
    machine = machine_info_without_cuda()
    record = new_record("zerogpu", args, machine, {"frames": args.frames, "prompt_rows": 200,
                                                   "weights": "full-size, random", "sampling": "default",
                                                   "step": "AOTInductor units" if args.aoti_dir
                                                   else "eager (no compile, no graphs)",
                                                   "placement": args.placement})
    record["args"].pop("lm_config", None)
    record["args"].pop("codec_config", None)
    record["args"].pop("aoti_dir", None)
    warm = [r for r in runs if r["worker"] == "warm"]
    record.update(runs=runs, checks=checks, cold={k: runs[0][k] for k in ("ttfp_ms", "rtf")},
                  warm={"ttfp_ms": summary(warm, "ttfp_ms"), "rtf": summary(warm, "rtf")})
    print(json.dumps({"checks": checks, "cold": record["cold"], "warm": record["warm"]}, indent=2))
    if args.json:
        write_record(record, args.json)
    failed = checks["parent_cuda_initialized"] or checks["parent_holds_cuda_context"]
    if failed:
        print("FAILED: the parent process initialised CUDA", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
