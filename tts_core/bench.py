"""`python -m tts_core bench`: TTFP / RTF / throughput / memory with full-size random weights.

Models are built from the real config.json files (no download), with random weights engineered so
the LM never stops by itself; every stream generates exactly `--frames` frames from a voice-clone
prompt of `--prompt-rows` rows. Streams go through the real engine (scheduler, batched LM steps,
batched streaming codec decode), so the figures are what a listener would get. Figures only:
nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import torch

logger = logging.getLogger(__name__)


def _default_config(*parts: str) -> str | None:
    root = os.environ.get("MOSS_TTS_PARITY_DIR") or str(Path(__file__).resolve().parents[2] / "shared"
                                                         / "moss_tts_nano_data")
    path = Path(root, *parts)
    return str(path) if path.is_file() else None


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lm-config", default=_default_config("hf_checkpoint_meta", "config.json"),
                        help="LM config.json (default: the shared data's real config)")
    parser.add_argument("--codec-config", default=_default_config("codec", "config.json"),
                        help="codec config.json (default: the shared data's real config)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="LM dtype (auto = bf16 on CUDA, fp32 on CPU)")
    parser.add_argument("--streams", default=None,
                        help="comma-separated concurrency levels (default 1,4,16,64 on CUDA, 1,2 on CPU)")
    parser.add_argument("--frames", type=int, default=None, help="frames per stream (default 100 CUDA, 40 CPU)")
    parser.add_argument("--prompt-rows", type=int, default=200)
    parser.add_argument("--greedy", action="store_true", help="argmax instead of the default sampling")
    parser.add_argument("--eager-compare", action="store_true",
                        help="also run with CUDA graphs disabled and print the ratio (CUDA only)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--components", action="store_true", help="also time prefill / LM step / codec decode")
    parser.add_argument("--devices", default=None,
                        help="CUDA: one engine per device, e.g. cuda:0,cuda:1 (streams routed to the least loaded)")
    parser.add_argument("--codec-dtype", default="fp32", choices=["fp32", "bf16"],
                        help="codec compute precision on CUDA (the LM follows --dtype)")
    parser.add_argument("--cold-voice", action="store_true",
                        help="no prompt-prefix reuse: every request pays the full prefill")
    parser.add_argument("--quantize", choices=["int8"], help="CPU: int8 dynamic quantisation of the linears")
    parser.add_argument("--fidelity", action="store_true",
                        help="with --quantize: greedy code agreement and waveform SNR against fp32")


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def build_random_models(lm_config: str, codec_config: str, device: torch.device, lm_dtype: torch.dtype):
    from .model.codec import MossAudioCodec
    from .model.codec_config import CodecConfig
    from .model.lm import MossTTSNanoLM
    from .model.lm_config import LMConfig
    from .tiny import engineer_never_stop

    generator = torch.Generator(device="cpu").manual_seed(0)
    lm = MossTTSNanoLM(LMConfig.from_json(lm_config))
    codec = MossAudioCodec(CodecConfig.from_json(codec_config))
    with torch.no_grad():
        for module in (lm, codec):
            for name, param in module.named_parameters():
                noise = torch.randn(param.shape, generator=generator)
                if param.ndim >= 2:
                    is_table = "wte" in name or "embeddings" in name or "codebook" in name
                    param.copy_(noise if is_table else noise / max(1, param[0].numel()) ** 0.5)
                elif name.endswith("bias"):
                    param.copy_(0.02 * noise)
                else:
                    param.copy_(1.0 + 0.05 * noise)
        lm.tie_weights()
        engineer_never_stop(lm)
    codec.fuse()
    lm = lm.to(device=device, dtype=lm_dtype).eval().requires_grad_(False)
    codec = codec.to(device).eval().requires_grad_(False)
    return lm, codec


def make_prompt(lm_config, rows: int, seed: int = 0) -> np.ndarray:
    """A voice-clone-shaped prompt of `rows` rows: 78 template rows, reference frames, text ids."""
    rng = np.random.default_rng(seed)
    ref_frames = max(1, (rows - 78) * 3 // 4)
    text = max(1, rows - 78 - ref_frames)
    head = np.full((14, 17), 1024, np.int64)
    head[:, 0] = rng.integers(20, 16000, 14)
    head[-1, 0] = lm_config.audio_start_id
    ref = np.concatenate([np.full((ref_frames, 1), lm_config.audio_user_slot_id),
                          rng.integers(0, 1024, (ref_frames, 16))], axis=1)
    tail = np.full((rows - 14 - ref_frames, 17), 1024, np.int64)
    tail[:, 0] = rng.integers(20, 16000, len(tail))
    tail[0, 0] = lm_config.audio_end_id
    tail[-1, 0] = lm_config.audio_start_id
    del text
    return np.concatenate([head, ref, tail]).astype(np.int64)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prompt_prefix_rows(prompt: np.ndarray, lm_config) -> int:
    """Rows before the text (template + reference frames + instruction block), as the synthesizer
    marks them: everything up to and including the audio-end row plus the 56-row instruction block."""
    end = int(np.flatnonzero(prompt[:, 0] == lm_config.audio_end_id)[0])
    return end + 1 + 56


def run_level(engine, prompt: np.ndarray, streams: int, frames: int, sampling, device,
              prefix_rows: int = 0) -> dict:
    """`device` may be a list (an `EnginePool` over several GPUs): peak memory is then summed."""
    from .engine.types import Segment, StreamJob
    from .types import SAMPLE_RATE_HZ

    devices = list(device) if isinstance(device, (list, tuple)) else [device]
    device = devices[0]
    if device.type == "cuda":
        for d in devices:
            torch.cuda.reset_peak_memory_stats(d)
    results: list[dict] = [{} for _ in range(streams)]
    handles = []
    start = time.monotonic()
    for i in range(streams):
        job = StreamJob(request_id=f"bench-{streams}-{i}-{time.monotonic_ns()}",
                        segments=(Segment(rows=prompt, max_frames=frames, prefix_rows=prefix_rows),), sampling=sampling, seed=1000 + i,
                        submitted_at=time.monotonic())
        handles.append(engine.submit(job))

    def drain(i: int) -> None:
        audio, first = 0, None
        while True:
            item = handles[i].outbox.get()
            if item is None:
                break
            if isinstance(item, BaseException):
                results[i]["error"] = repr(item)
                break
            audio += item.pcm.shape[1]
            first = item.timings.first_audio_s if first is None else first
            results[i].update(elapsed=item.timings.elapsed_s, first=first)
        results[i]["audio_s"] = audio / SAMPLE_RATE_HZ

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"bench streams failed: {errors[:3]}")
    ttfp = [r["first"] for r in results]
    rtf = [r["elapsed"] / r["audio_s"] for r in results]
    total_audio = sum(r["audio_s"] for r in results)
    if device.type == "cuda":
        peak = sum(torch.cuda.max_memory_allocated(d) for d in devices) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    return {
        "streams": streams,
        "frames": frames,
        "ttfp_p50_ms": 1000 * statistics.median(ttfp),
        "ttfp_p95_ms": 1000 * _percentile(ttfp, 95),
        "rtf_p50": statistics.median(rtf),
        "rtf_max": max(rtf),
        "x_realtime": total_audio / wall,
        "peak_mem_mib": peak,
        "peak_mem_kind": "cuda_allocated" if device.type == "cuda" else "rss",
    }


def time_components(runner, prompt: np.ndarray, device: torch.device, repeats: int = 20) -> dict:
    """Median ms of one prefill, one batch-1 LM frame step, and one 1-frame codec decode."""
    from .config import SamplingParams

    runner.begin_stream(0, SamplingParams(), 0)
    timings: dict[str, list[float]] = {"prefill_ms": [], "lm_frame_ms": [], "codec_frame_ms": []}
    for _ in range(3):
        _sync(device)
        t0 = time.perf_counter()
        runner.start_segment(0, prompt, None)
        if hasattr(runner, "flush_prefills"):
            runner.flush_prefills()  # the static path defers prefill to the next step
        _sync(device)
        timings["prefill_ms"].append(1000 * (time.perf_counter() - t0))
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, codes = runner.step([0])
        t1 = time.perf_counter()
        runner.decode([0], codes[:, None, :])
        t2 = time.perf_counter()
        timings["lm_frame_ms"].append(1000 * (t1 - t0))
        timings["codec_frame_ms"].append(1000 * (t2 - t1))
    runner.release(0)
    return {name: statistics.median(values) for name, values in timings.items()}


def run_bench(args: argparse.Namespace) -> int:
    from .config import EngineConfig, SamplingParams
    from .devices import configure_cpu_threads, resolve_device, resolve_lm_dtype
    from .engine.engine import Engine
    from .engine.pool import EnginePool
    from .engine.runner import Runner
    from .model.lm_config import LMConfig

    if not args.lm_config or not args.codec_config:
        raise SystemExit("bench needs --lm-config and --codec-config (the real config.json files)")
    device = resolve_device(args.device)
    lm_dtype = resolve_lm_dtype(args.dtype, device)
    configure_cpu_threads(device)
    is_cuda = device.type == "cuda"
    levels = [int(x) for x in (args.streams or ("1,4,16,64" if is_cuda else "1,2")).split(",")]
    frames = args.frames or (100 if is_cuda else 40)
    sampling = SamplingParams.greedy() if args.greedy else SamplingParams()
    devices = [resolve_device(d.strip()) for d in args.devices.split(",")] if args.devices else [device]
    models = [build_random_models(args.lm_config, args.codec_config, d, lm_dtype) for d in devices]
    for _, model_codec in models:
        model_codec.set_compute_dtype(args.codec_dtype if is_cuda else "fp32")
    lm, codec = models[0]
    prompt = make_prompt(LMConfig.from_json(args.lm_config), args.prompt_rows)
    # Requests for a voice used before reuse its prompt-prefix KV (CPU path); --cold-voice measures
    # every request as the first one for its voice.
    prefix = 0 if args.cold_voice else prompt_prefix_rows(prompt, LMConfig.from_json(args.lm_config))
    fidelity = None
    if args.quantize:
        import copy

        from .model.quant import quantize_codec_int8, quantize_lm_int8

        reference = (copy.deepcopy(lm), copy.deepcopy(codec)) if args.fidelity else None
        quantize_lm_int8(lm)
        quantize_codec_int8(codec)
        if reference is not None:
            fidelity = measure_fidelity(reference, (lm, codec), prompt, frames)
    report = {"device": str(device), "device_name": torch.cuda.get_device_name(device) if is_cuda else
              f"cpu x{torch.get_num_threads()} threads", "lm_dtype": str(lm_dtype).removeprefix("torch."),
              "prompt_rows": int(prompt.shape[0]), "frames": frames, "sampling": "greedy" if args.greedy
              else "default", "torch": torch.__version__, "quantize": args.quantize, "modes": {},
              "devices": [str(d) for d in devices], "codec_dtype": args.codec_dtype if is_cuda else "fp32"}
    if fidelity is not None:
        report["fidelity"] = fidelity
    modes = [False, True] if (args.eager_compare and is_cuda) else [False]
    for enforce_eager in modes:
        label = "eager" if (enforce_eager or not is_cuda) else "graphed"
        rows = []
        for level in levels:
            slots = -(-level // len(devices))  # per engine
            config = EngineConfig(max_active_streams=slots, max_queue=0, enforce_eager=enforce_eager)
            runners = [Runner(m_lm, m_codec, num_slots=slots, max_context_rows=args.prompt_rows + frames + 8,
                              device=d, enforce_eager=enforce_eager) for (m_lm, m_codec), d in zip(models, devices)]
            if is_cuda and not enforce_eager and not runners[0].uses_graphs:
                label = "eager (graphs off by TTS_NO_CUDA_GRAPH)"
            stepper = runners[0].stepper
            report["compile"] = stepper.compile_mode if stepper is not None else "off"
            if args.components and level == levels[0]:
                report.setdefault("components", {})[label] = time_components(runners[0], prompt, device)
            engines = [Engine(runner, config) for runner in runners]
            engine = engines[0] if len(engines) == 1 else EnginePool(engines)
            run_level(engine, prompt, level, min(frames, 8), sampling, devices, prefix)  # warm-up
            row = run_level(engine, prompt, level, frames, sampling, devices, prefix)
            engine.close()
            rows.append(row)
            logger.info("%s %s", label, json.dumps(row))
        report["modes"][label] = rows
    _print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


@torch.inference_mode()
def measure_fidelity(reference, quantized, prompt: np.ndarray, frames: int) -> dict:
    """Greedy agreement of a quantised LM with the fp32 one, teacher-forced on the fp32 codes
    (every frame sees the same history), and the SNR of the quantised codec's decode of those codes."""
    from .config import SamplingParams
    from .engine.sampler import StreamSampler, batch_for_frame

    def greedy_frames(lm, forced: np.ndarray | None) -> np.ndarray:
        cache = lm.new_cache(1, len(prompt) + frames + 1)
        hidden = lm.prefill(torch.as_tensor(prompt), cache, 0)[None]
        sampler = StreamSampler(SamplingParams.greedy(), 0)
        out = []
        for i in range(frames):
            _, codes = lm.generate_frame(hidden, batch_for_frame([sampler]))
            out.append(codes[0].numpy())
            step = codes if forced is None else torch.as_tensor(forced[i : i + 1])
            hidden = lm.decode(step, cache, [0])
        return np.stack(out)

    ref_codes = greedy_frames(reference[0], None)
    q_codes = greedy_frames(quantized[0], ref_codes)
    codes_t = torch.as_tensor(ref_codes.T[None])  # [1, 16, F]
    ref_pcm = reference[1].decode(codes_t)
    q_pcm = quantized[1].decode(codes_t)
    noise = (ref_pcm - q_pcm).pow(2).sum().item()
    snr = 10 * np.log10(ref_pcm.pow(2).sum().item() / noise) if noise > 0 else float("inf")
    return {"greedy_code_agreement": float((q_codes == ref_codes).mean()),
            "first_codebook_agreement": float((q_codes[:, 0] == ref_codes[:, 0]).mean()),
            "codec_snr_db": float(snr), "frames": frames}


def _print_report(report: dict) -> None:
    print(f"# bench on {report['device_name']} ({report['device']}), LM {report['lm_dtype']}, "
          f"prompt {report['prompt_rows']} rows, {report['frames']} frames/stream, sampling {report['sampling']}, "
          f"torch {report['torch']}, quantize {report.get('quantize')}, codec {report.get('codec_dtype')}, "
          f"engines on {','.join(report.get('devices', [report['device']]))}, LM step compile {report.get('compile')}")
    if report.get("fidelity"):
        print("fidelity vs fp32: " + ", ".join(f"{k} {v:.4g}" for k, v in report["fidelity"].items()))
    for label, comp in report.get("components", {}).items():
        print(f"components ({label}): " + ", ".join(f"{k} {v:.2f}" for k, v in comp.items()))
    print("| mode | streams | TTFP p50 ms | TTFP p95 ms | RTF p50 | RTF max | x realtime | peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for label, rows in report["modes"].items():
        for r in rows:
            print(f"| {label} | {r['streams']} | {r['ttfp_p50_ms']:.1f} | {r['ttfp_p95_ms']:.1f} | {r['rtf_p50']:.3f} "
                  f"| {r['rtf_max']:.3f} | {r['x_realtime']:.1f} | {r['peak_mem_mib']:.0f} |")
    modes = report["modes"]
    if "graphed" in modes and "eager" in modes:
        for g, e in zip(modes["graphed"], modes["eager"]):
            print(f"streams {g['streams']}: graphed/eager RTF ratio {g['rtf_p50'] / e['rtf_p50']:.2f}, "
                  f"TTFP ratio {g['ttfp_p50_ms'] / e['ttfp_p50_ms']:.2f}")
