"""GPU figures that are not timings of the engine (measured and recorded, never asserted):

1. codec precision: fp32 vs bf16-autocast output (SNR, offline and streaming) and per-frame speed;
2. determinism: one request alone vs inside a batch of N, and eager vs graphed, for fp32 / bf16 and
   for the bucketed and the batch-invariant runner;
3. compiled vs per-op LM step (greedy): in fp32 the tests demand identical codes; in bf16 the fused
   kernels round differently, and this measures how often the codes still agree.

Full-size models from the real configs with random weights. Usage:
    python -m bench.engine.gpu_checks [--lm-config ... --codec-config ...] [--streams 64 --frames 40] [--json F]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from bench.lib.args import default_config_path
from bench.lib.drive import drive
from bench.lib.machine import machine_info
from bench.lib.models import build_random_models, make_prompt
from bench.lib.record import new_record, write_record
from bench.lib.runners import static_runner
from tts_core.config import SamplingParams
from tts_core.engine.cuda.static_runner import StaticRunner
from tts_core.model.lm_config import LMConfig


def snr_db(ref: torch.Tensor, test: torch.Tensor) -> float:
    noise = (ref.double() - test.double()).pow(2).sum().item()
    return float("inf") if noise == 0 else float(10 * np.log10(ref.double().pow(2).sum().item() / noise))


def codec_precision(lm, codec, device: torch.device, frames: int = 50) -> dict:
    codes = torch.randint(0, 1024, (4, 16, frames), generator=torch.Generator().manual_seed(0))
    outputs, streamed, speed = {}, {}, {}
    for name in ("fp32", "bf16"):
        codec.set_compute_dtype(name)
        outputs[name] = codec.decode(codes.to(device)).cpu()
        runner = StaticRunner(lm, codec, num_slots=64, max_context_rows=32, device=device)
        pieces = [runner.decode(list(range(4)), codes[:, :, f : f + 1].transpose(1, 2).numpy())
                  for f in range(frames)]
        streamed[name] = torch.from_numpy(np.concatenate(pieces, axis=-1))
        for rows in (1, 64):
            slots = list(range(rows))
            one = np.random.default_rng(0).integers(0, 1024, (rows, 1, 16))
            times = []
            for _ in range(25):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                runner.decode(slots, one)
                times.append(1000 * (time.perf_counter() - t0))
            speed[f"{name}_x{rows}_ms"] = round(statistics.median(times[5:]), 3)
    codec.set_compute_dtype("fp32")
    return {"frames": frames, "rows": 4,
            "offline_bf16_vs_fp32_snr_db": round(snr_db(outputs["fp32"], outputs["bf16"]), 2),
            "streamed_fp32_vs_offline_fp32_snr_db": round(snr_db(outputs["fp32"], streamed["fp32"]), 2),
            "streamed_bf16_vs_offline_fp32_snr_db": round(snr_db(outputs["fp32"], streamed["bf16"]), 2),
            "one_frame_decode": speed}


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.nonzero((a[:n] != b[:n]).any(axis=1))[0]
    return int(diff[0]) if len(diff) else n


def determinism(models, lm_config, device, batch_invariant: bool, streams: int, frames: int, solo: int) -> dict:
    prompts = [make_prompt(lm_config, 150 + 10 * (i % 8), seed=i) for i in range(streams)]
    seeds = [1000 + i for i in range(streams)]
    params = SamplingParams()
    kwargs = dict(max_context_rows=260 + frames, device=device, batch_invariant=batch_invariant)
    graphed = static_runner(models, streams, **kwargs)
    together, _ = drive(graphed, prompts, seeds, list(range(streams)), params, frames)
    same, first = 0, []
    for i in range(solo):
        alone, _ = drive(graphed, [prompts[i]], [seeds[i]], [0], params, frames)
        same += int(np.array_equal(alone[0], together[i]))
        first.append(_first_difference(alone[0], together[i]))
    del graphed
    eager = static_runner(models, streams, enforce_eager=True, **kwargs)
    eager_codes, _ = drive(eager, prompts, seeds, list(range(streams)), params, frames)
    return {"streams": streams, "frames": frames, "solo_equal_batch": f"{same}/{solo}",
            "first_differing_frame": first,
            "eager_equal_graphed": f"{sum(np.array_equal(a, b) for a, b in zip(eager_codes, together))}/{streams}"}


def compiled_vs_per_op(models, lm_config, device, frames: int = 16) -> dict:
    """Greedy codes of the compiled step against the per-op step, both graphed, six streams."""
    prompts = [make_prompt(lm_config, 100 + 13 * i, seed=i) for i in range(6)]
    args = (prompts, [21 + i for i in range(6)], [0, 2, 3, 5, 6, 7], SamplingParams.greedy())

    def run(**kwargs):
        return drive(StaticRunner(*models, num_slots=8, max_context_rows=320, device=device, **kwargs), *args,
                     frames=frames)[0]

    want, got = run(compile="off"), run()
    agree = np.mean([(w[: len(g)] == g[: len(w)]).mean() for w, g in zip(want, got)])
    return {"streams_identical": f"{sum(np.array_equal(w, g) for w, g in zip(want, got))}/{len(want)}",
            "code_agreement": round(float(agree), 4), "frames": frames}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lm-config", default=default_config_path("hf_checkpoint_meta", "config.json"))
    parser.add_argument("--codec-config", default=default_config_path("codec", "config.json"))
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--solo", type=int, default=12, help="streams re-run alone for the comparison")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only smoke-tests this script (the static runner, run eagerly)")
    parser.add_argument("--json", help="write the record to this JSON file")
    parser.add_argument("--note", action="append", default=[])
    args = parser.parse_args()
    device = torch.device(args.device)
    lm_config = LMConfig.from_json(args.lm_config)
    models = {name: build_random_models(args.lm_config, args.codec_config, device, dtype)
              for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    record = new_record("gpu-checks", args, machine_info([device]), {"device": str(device)})
    record["codec_precision"] = codec_precision(*models["bf16"], device)
    record["determinism"] = {
        f"{name} {'batch-invariant' if invariant else 'bucketed'}":
            determinism(models[name], lm_config, device, invariant, args.streams, args.frames, args.solo)
        for name in ("fp32", "bf16") for invariant in (False, True)}
    if device.type == "cuda":
        record["compiled_vs_per_op"] = {name: compiled_vs_per_op(models[name], lm_config, device)
                                        for name in ("fp32", "bf16")}
    for key in ("codec_precision", "determinism", "compiled_vs_per_op"):
        if key in record:
            print(f"{key}: {record[key]}")
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
