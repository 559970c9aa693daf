"""GPU figures that are not timings of the engine (printed, never asserted):

1. codec precision: fp32 vs bf16-autocast output (SNR, offline and streaming) and per-frame speed;
2. determinism: one request alone vs inside a batch of N, and eager vs graphed, for fp32 / bf16 and
   for the bucketed and the batch-invariant runner.

Full-size models from the real configs with random weights. Usage:
    python bench/gpu_checks.py [--lm-config ... --codec-config ...] [--streams 64 --frames 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from runner_helpers import drive  # noqa: E402

from tts_core.bench import _default_config, build_random_models, make_prompt  # noqa: E402
from tts_core.config import SamplingParams  # noqa: E402
from tts_core.engine.runner import Runner  # noqa: E402
from tts_core.model.lm_config import LMConfig  # noqa: E402

CUDA = torch.device("cuda")  # --device cpu only smoke-tests this script (CPU runs the plain eager path)


def snr_db(ref: torch.Tensor, test: torch.Tensor) -> float:
    noise = (ref.double() - test.double()).pow(2).sum().item()
    return float("inf") if noise == 0 else 10 * np.log10(ref.double().pow(2).sum().item() / noise)


def codec_precision(lm, codec, frames: int = 50) -> None:
    codes = torch.randint(0, 1024, (4, 16, frames), generator=torch.Generator().manual_seed(0))
    outputs, streamed, speed = {}, {}, {}
    for name in ("fp32", "bf16"):
        codec.set_compute_dtype(name)
        outputs[name] = codec.decode(codes.to(CUDA)).cpu()
        runner = Runner(lm, codec, num_slots=64, max_context_rows=32, device=CUDA)
        pieces = [runner.decode(list(range(4)), codes[:, :, f : f + 1].transpose(1, 2).numpy())
                  for f in range(frames)]
        streamed[name] = torch.from_numpy(np.concatenate(pieces, axis=-1))
        for rows in (1, 64):
            slots = list(range(rows))
            one = np.random.default_rng(0).integers(0, 1024, (rows, 1, 16))
            times = []
            for _ in range(25):
                if CUDA.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                runner.decode(slots, one)
                times.append(1000 * (time.perf_counter() - t0))
            speed[(name, rows)] = statistics.median(times[5:])
    codec.set_compute_dtype("fp32")
    print(f"codec precision ({frames} random frames x 4 rows, random weights): "
          f"offline bf16 vs fp32 SNR {snr_db(outputs['fp32'], outputs['bf16']):.1f} dB; "
          f"streamed (1-frame graphs) fp32 vs offline fp32 SNR {snr_db(outputs['fp32'], streamed['fp32']):.1f} dB; "
          f"streamed bf16 vs offline fp32 SNR {snr_db(outputs['fp32'], streamed['bf16']):.1f} dB")
    print("codec 1-frame decode ms (graphed, incl. copies): " + ", ".join(
        f"{name} x{rows} {ms:.2f}" for (name, rows), ms in speed.items()))


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.nonzero((a[:n] != b[:n]).any(axis=1))[0]
    return int(diff[0]) if len(diff) else n


def determinism(models, lm_config, dtype_name: str, batch_invariant: bool, streams: int, frames: int,
                solo: int) -> None:
    lm, codec = models
    prompts = [make_prompt(lm_config, 150 + 10 * (i % 8), seed=i) for i in range(streams)]
    seeds = [1000 + i for i in range(streams)]
    params = SamplingParams()
    kwargs = dict(num_slots=streams, max_context_rows=260 + frames, device=CUDA, batch_invariant=batch_invariant)
    graphed = Runner(lm, codec, **kwargs)
    together, _ = drive(graphed, prompts, seeds, list(range(streams)), params, frames)
    same, first = 0, []
    for i in range(solo):
        alone, _ = drive(graphed, [prompts[i]], [seeds[i]], [0], params, frames)
        same += int(np.array_equal(alone[0], together[i]))
        first.append(_first_difference(alone[0], together[i]))
    del graphed
    eager = Runner(lm, codec, enforce_eager=True, **kwargs)
    eager_codes, _ = drive(eager, prompts, seeds, list(range(streams)), params, frames)
    eager_same = sum(np.array_equal(a, b) for a, b in zip(eager_codes, together))
    mode = "batch-invariant" if batch_invariant else "bucketed"
    print(f"determinism {dtype_name} {mode}: solo == in batch of {streams}: {same}/{solo} streams identical "
          f"over {frames} frames (first differing frame per stream: {first}); "
          f"eager == graphed in the batch: {eager_same}/{streams}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lm-config", default=_default_config("hf_checkpoint_meta", "config.json"))
    parser.add_argument("--codec-config", default=_default_config("codec", "config.json"))
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--solo", type=int, default=12, help="streams re-run alone for the comparison")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    global CUDA
    CUDA = torch.device(args.device)
    lm_config = LMConfig.from_json(args.lm_config)
    models = {name: build_random_models(args.lm_config, args.codec_config, CUDA, dtype)
              for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    codec_precision(*models["bf16"])
    for name in ("fp32", "bf16"):
        for batch_invariant in (False, True):
            determinism(models[name], lm_config, name, batch_invariant, args.streams, args.frames, args.solo)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
