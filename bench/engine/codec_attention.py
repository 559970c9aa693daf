"""Codec streaming pass per batch size: the ring attention as PyTorch's fused SDPA kernel, as two GEMMs
around a softmax (`codec_layers.ring_attention`) and as the Triton ring kernel (`model/ring_kernel.py`),
each pass captured as a CUDA graph and replayed. The rings are filled first (160 frames, 12.8 s), so
every window is full as in a long stream (the ring kernel's skipping of empty slots never helps here).
Writes a JSON record (kind "codec_attention"); `engine/codec_passes.py` picks per (rows, frames) from it.

    python -m bench.engine.codec_attention --json bench/results/codec-attention-h200.json   # on a GPU
"""

from __future__ import annotations

import argparse
import statistics

import torch

from bench.lib.args import default_config_path
from bench.lib.machine import machine_info
from bench.lib.models import build_random_models
from bench.lib.record import new_record, write_record

# Record labels per `codec_layers.ATTENTION_MODES` entry ("fused" is PyTorch's SDPA kernel).
MODES = (("fused_ms", "sdpa"), ("gemm_ms", "gemm"), ("ring_kernel_ms", "ring_kernel"))


@torch.inference_mode()
def time_pass(codec, rows: int, frames: int, attention: str, repeats: int, device: torch.device) -> float:
    """Median ms of one graphed `decode_frames_static` pass of `frames` frames over `rows` full rings."""
    state = codec.new_decode_state(rows, device)
    generator = torch.Generator(device=device).manual_seed(0)
    codes = torch.randint(0, 1024, (rows, 16, 4), device=device, generator=generator)
    active = torch.ones(rows, dtype=torch.bool, device=device)
    for _ in range(40):
        codec.decode_frames_static(codes, state, active)
    codes = codes[:, :, :frames].contiguous()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            codec.decode_frames_static(codes, state, active, attention=attention)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        codec.decode_frames_static(codes, state, active, attention=attention)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,4,8,16,32,64,128,256")
    parser.add_argument("--frames", default="1,4")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--codec-dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--json")
    parser.add_argument("--note", action="append", help="a note kept in the record")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this bench needs a CUDA GPU")
    device = torch.device("cuda")
    lm_config = default_config_path("hf_checkpoint_meta", "config.json")
    codec_config = default_config_path("codec", "config.json")
    if not lm_config or not codec_config:
        raise SystemExit("the real config.json files are needed: set MOSS_TTS_PARITY_DIR to the shared data")
    lm, codec = build_random_models(lm_config, codec_config, device, torch.bfloat16)
    del lm
    codec.set_compute_dtype(args.codec_dtype)
    results = []
    for rows in (int(r) for r in args.rows.split(",")):
        for frames in (int(f) for f in args.frames.split(",")):
            row = {"rows": rows, "frames": frames}
            for label, attention in MODES:
                if attention == "ring_kernel" and args.codec_dtype != "fp32":
                    continue  # the ring kernel is fp32 only
                row[label] = round(time_pass(codec, rows, frames, attention, args.repeats, device), 3)
            print(row, flush=True)
            results.append(row)
        torch.cuda.empty_cache()
    record = new_record("codec_attention", args, machine_info([device]), {"codec_dtype": args.codec_dtype})
    record["passes"] = results
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
