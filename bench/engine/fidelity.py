"""Fidelity of every reduced-precision mode against fp32, with its speed, in one record.

CPU (`--device cpu`): the weight modes of `tts_core/model/quant.py` (fp16, int8) against fp32.
CUDA (`--device cuda`): the LM in bf16 and fp16 against fp32, and the codec's bf16 / fp16
autocast against fp32.
Each LM comparison is teacher-forced greedy (`bench/lib/fidelity.py`): on the tiny parity
checkpoint's recorded prompts (cases A, B, D) and on the full-size model with random weights;
the codec comparison is the SNR of a streaming decode of the same codes. Speed: median ms of one
batch-1 LM frame and one 1-frame codec decode on the plain (eager) path, measured side by side.

    python -m bench.engine.fidelity --device cpu --json bench/results/fidelity-cpu.json
    python -m bench.engine.fidelity --device cuda --json bench/results/fidelity-gpu.json   # on the H200
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from bench.lib.args import default_config_path
from bench.lib.fidelity import compare_models
from bench.lib.machine import machine_info
from bench.lib.models import build_random_models, make_prompt
from bench.lib.record import new_record, write_record
from tts_core.config import SamplingParams
from tts_core.engine.sampler import StreamSampler, batch_for_frame
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm
from tts_core.model.quant import quantize_codec, quantize_lm

PARITY_CASES = ("A_voice_clone_en", "B_voice_clone_zh", "D_continuation_text_only")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def frame_ms(lm, codec, prompt, repeats: int = 12) -> dict:
    """Median ms of a batch-1 LM frame (local + global step) and of a 1-frame codec decode."""
    device = lm.device
    cache = lm.new_cache(1, len(prompt) + repeats + 4)
    hidden = lm.prefill(torch.as_tensor(prompt), cache, 0)[None]
    local = lm.new_local_cache(1)
    sampler = StreamSampler(SamplingParams(), 0)
    state = codec.new_decode_state(1)
    lm_t, codec_t = [], []
    for _ in range(repeats + 2):
        _sync(device)
        t0 = time.perf_counter()
        _, codes = lm.generate_frame(hidden, batch_for_frame([sampler], device=device), local=local)
        hidden = lm.decode(codes, cache, [0])
        _sync(device)
        t1 = time.perf_counter()
        codec.decode_step(codes[:, :, None].to(codec.device), state)
        _sync(device)
        lm_t.append(1000 * (t1 - t0))
        codec_t.append(1000 * (time.perf_counter() - t1))
    return {"lm_frame_ms": round(statistics.median(lm_t[2:]), 2),
            "codec_frame_ms": round(statistics.median(codec_t[2:]), 2)}


def _rounded(figures: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}


def cpu_variants(lm, codec) -> dict:
    out = {"fp32": (lm, codec)}
    for mode in ("fp16", "int8"):
        out[mode] = (quantize_lm(copy.deepcopy(lm), mode), quantize_codec(copy.deepcopy(codec), mode))
    return out


def cuda_variants(lm, codec) -> dict:
    out = {"fp32": (lm, codec)}
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        test_codec = copy.deepcopy(codec)
        test_codec.set_compute_dtype(dtype)
        out[name] = (copy.deepcopy(lm).to(dtype), test_codec)
    return out


def measure(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    make = cpu_variants if device.type == "cpu" else cuda_variants
    parity = Path(args.parity_dir)
    vectors = load_file(str(parity / "tiny_lm_vectors.safetensors"))
    tiny = (load_lm(parity / "tiny_lm", device=device), load_codec(parity / "tiny_codec", device=device))
    full = build_random_models(args.lm_config, args.codec_config, device, torch.float32)
    full_prompt = make_prompt(full[0].config, 200)
    results = {}
    for label, base, prompts in (("parity", tiny, [vectors[f"{c}.input_ids"].numpy() for c in PARITY_CASES]),
                                 ("full-size random", full, [full_prompt])):
        variants = make(*base)
        for name, models in variants.items():
            if name == "fp32":
                continue
            runs = [compare_models(base, models, prompt, args.frames) for prompt in prompts]
            results.setdefault(name, {})[label] = _rounded({
                "top1_agreement": statistics.mean(r["top1_agreement"] for r in runs),
                "codebook0_agreement": statistics.mean(r["codebook0_agreement"] for r in runs),
                "max_abs_dlogit": max(r["max_abs_dlogit"] for r in runs),
                "logit_scale": max(r["logit_scale"] for r in runs),
                "codec_snr_db": min(r["codec_snr_db"] for r in runs), "frames": args.frames, "prompts": len(runs)})
        if label == "full-size random":  # speed of every mode, side by side
            for name, models in variants.items():
                results.setdefault(name, {})["speed"] = frame_ms(*models, full_prompt)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="CPU: torch threads")
    parser.add_argument("--lm-config", default=default_config_path("hf_checkpoint_meta", "config.json"))
    parser.add_argument("--codec-config", default=default_config_path("codec", "config.json"))
    parser.add_argument("--parity-dir", default=str(Path(default_config_path("parity", "tiny_lm_vectors.safetensors")
                                                         or "parity/x").parent))
    parser.add_argument("--json", help="write the record here")
    parser.add_argument("--note", action="append", default=[])
    args = parser.parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    record = new_record("fidelity", args, machine_info([torch.device(args.device)]),
                        {"device": args.device, "frames": args.frames})
    record["modes"] = measure(args)
    for name, figures in record["modes"].items():
        print(name, figures)
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
