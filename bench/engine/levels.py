"""`python -m bench.engine`: TTFP / RTF / throughput / memory with full-size random weights.

Models are built from the real config.json files (no download), with random weights engineered so
the LM never stops by itself; every stream asks for exactly `--frames` frames of a voice-clone
request whose prompt has `--prompt-rows` rows. Requests go through `Synthesizer.stream()` (text
normalisation, tokenizer, prompt building, the real engine with its scheduler, batched LM steps and
batched streaming codec decode), so TTFP is what a caller of `stream()` waits for. The models are
built once; then per concurrency level an engine, a Synthesizer around it, one warm-up run and
`--repeats` measured runs of concurrent `stream()` calls. Figures only: nothing here asserts a
timing. `--json FILE` writes one record (machine, date, arguments, per-level medians with min-max
over the runs); `scripts/render_figures.py` turns such records into docs/PERFORMANCE.md's tables.
"""

from __future__ import annotations

import argparse
import copy
import gc
import logging
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.engine.components import time_components
from bench.engine.memory import PeakMemory
from bench.lib.args import default_config_path
from bench.lib.fidelity import compare_models
from bench.lib.machine import machine_info
from bench.lib.models import build_random_models, make_prompt, voice_codes
from bench.lib.record import new_record, print_record, write_record
from bench.lib.streams import run_streams, summarize_level, summarize_run
from tts_core.config import SamplingParams
from tts_core.model.fused_ops import fused_enabled
from tts_core.model.quant import quantize_codec, quantize_lm

logger = logging.getLogger(__name__)

# One sentence: one prompt segment, and ~20 tokens, so the text's own frame cap (25 + 8 per token)
# stays above the default --frames.
BENCH_TEXT = "The bench reads this sentence aloud, again and again, to see how soon the first audio arrives."
WARMUP_FRAMES = 8


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """What one concurrency level runs."""

    streams: int
    frames: int
    prompt_rows: int
    repeats: int
    ref_frames: int  # reference-audio frames in each request's voice (sets the prompt length)
    cold_voice: bool
    sampling: SamplingParams
    enforce_eager: bool


def bench_synthesizer(engine, tokenizer, config, lm_config, cache_dir: Path):
    """A `Synthesizer` around an engine of random-weight models; voices come as codes, never clips."""
    from tts_core.synthesizer import Synthesizer
    from tts_core.voices import VoiceBank, load_catalog

    voices = VoiceBank(load_catalog(), voices_dir=None, cache_dir=cache_dir, encoder=None,
                       codec_fingerprint="bench-random-weights", allow_download=False)
    return Synthesizer(tokenizer=tokenizer, engine=engine, voices=voices, config=config, info={},
                       lm_config=lm_config)


def _requests(plan: LevelPlan, run: int, frames: int) -> list:
    """One run's requests. A warm voice is the same for every request (its prompt prefix is cached
    after the warm-up); a cold one is new for every request of every run."""
    from tts_core.types import SynthesisRequest, Voice

    def voice(i: int) -> Voice:
        seed = 1 + (run + 1) * 10_000 + i if plan.cold_voice else 0  # run -1 is the warm-up
        return Voice.from_codes(voice_codes(plan.ref_frames, seed))

    return [SynthesisRequest(text=BENCH_TEXT, voice=voice(i), mode="voice_clone", sampling=plan.sampling,
                             seed=1000 + i, max_frames=frames) for i in range(plan.streams)]


def reference_frames_for(synth, prompt_rows: int) -> int:
    """Reference frames that make the bench request's prompt `prompt_rows` rows long."""
    from tts_core.types import SynthesisRequest, Voice

    probe = SynthesisRequest(text=BENCH_TEXT, voice=Voice.from_codes(voice_codes(1, 0)), max_frames=1)
    segments = synth.build(probe).segments
    assert len(segments) == 1, f"the bench text became {len(segments)} segments"
    ref_frames = prompt_rows - (segments[0].rows.shape[0] - 1)
    if ref_frames < 1:
        raise SystemExit(f"--prompt-rows {prompt_rows} is too short: the template and text alone take "
                         f"{segments[0].rows.shape[0] - 1} rows")
    return ref_frames


def bench_level(models, devices, plan: LevelPlan, tokenizer, context_rows: int, cache_dir: Path,
                components: bool) -> tuple[dict, dict | None]:
    """One level: returns its row (medians and ranges over the runs, per-level memory, every run) and,
    when asked, the component timings taken on its first runner before the engine starts."""
    from tts_core.config import EngineConfig
    from tts_core.engine.engine import Engine
    from tts_core.engine.pool import EnginePool
    from tts_core.engine.runner_types import build_runner

    slots = -(-plan.streams // len(devices))  # per engine
    config = EngineConfig(max_active_streams=slots, max_queue=0, max_context_rows=context_rows,
                          enforce_eager=plan.enforce_eager)
    gc.collect()
    if devices[0].type == "cuda":
        torch.cuda.empty_cache()
    timed = None
    with PeakMemory(devices) as memory:
        runners = [build_runner(lm, codec, num_slots=slots, max_context_rows=context_rows, device=device,
                                enforce_eager=plan.enforce_eager) for (lm, codec), device in zip(models, devices)]
        if components:
            timed = time_components(runners[0], make_prompt(models[0][0].config, plan.prompt_rows), devices[0])
        engines = [Engine(runner, config) for runner in runners]
        engine = engines[0] if len(engines) == 1 else EnginePool(engines)
        synth = bench_synthesizer(engine, tokenizer, config, models[0][0].config, cache_dir)
        try:
            run_streams(synth, _requests(plan, -1, min(plan.frames, WARMUP_FRAMES)))
            runs = [summarize_run(*run_streams(synth, _requests(plan, run, plan.frames)))
                    for run in range(plan.repeats)]
        finally:
            engine.close()
    row = {"streams": plan.streams, "frames": plan.frames, "repeats": plan.repeats, **summarize_level(runs),
           "memory": memory.result(), "graphs": runners[0].uses_graphs, "compile": runners[0].compile_mode,
           "runs": runs}
    return row, timed


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    """The engine bench's flags (also read by `bench.engine.trace`)."""
    parser.add_argument("--lm-config", default=default_config_path("hf_checkpoint_meta", "config.json"),
                        help="LM config.json (default: the shared data's real config)")
    parser.add_argument("--codec-config", default=default_config_path("codec", "config.json"),
                        help="codec config.json (default: the shared data's real config)")
    parser.add_argument("--tokenizer", default=default_config_path("hf_checkpoint_meta", "tokenizer.model"),
                        help="tokenizer.model (default: the shared data's real tokenizer)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="LM dtype (auto = bf16 on CUDA, fp32 on CPU)")
    parser.add_argument("--streams", default=None,
                        help="comma-separated concurrency levels (default 1,4,16,64 on CUDA, 1,2 on CPU)")
    parser.add_argument("--frames", type=int, default=None, help="frames per stream (default 100 CUDA, 40 CPU)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="measured runs per level (after one warm-up run); figures are their median and range")
    parser.add_argument("--prompt-rows", type=int, default=200)
    parser.add_argument("--greedy", action="store_true", help="argmax instead of the default sampling")
    parser.add_argument("--eager-compare", action="store_true",
                        help="also run with CUDA graphs disabled, side by side, with ratios (CUDA only)")
    parser.add_argument("--json", help="write the record (machine, date, arguments, figures) to this JSON file")
    parser.add_argument("--note", action="append", default=[],
                        help="a remark stored in the JSON record (repeatable), e.g. what else ran on the machine")
    parser.add_argument("--components", action="store_true", help="also time prefill / LM step / codec decode")
    parser.add_argument("--devices", default=None,
                        help="CUDA: one engine per device, e.g. cuda:0,cuda:1 (streams routed to the least loaded)")
    parser.add_argument("--codec-dtype", default="fp32", choices=["fp32", "bf16", "fp16"],
                        help="codec compute precision on CUDA (the LM follows --dtype)")
    parser.add_argument("--cold-voice", action="store_true",
                        help="a new voice for every request: no prompt-prefix reuse, every request pays the full prefill")
    parser.add_argument("--context-rows", type=int, default=None,
                        help="KV rows per stream (default: the server's, EngineConfig.max_context_rows)")
    parser.add_argument("--quantize", choices=["fp16", "int8"],
                        help="CPU weight precision (tts_core/model/quant.py); default fp32")
    parser.add_argument("--switch-interval-ms", type=float, default=None,
                        help="the interpreter's thread switch interval for this run (sys.setswitchinterval; "
                             "Python's default is 5 ms): how long a thread that wants the interpreter lock may "
                             "wait for the one holding it; recorded in the setup")
    parser.add_argument("--fidelity", action="store_true",
                        help="with --quantize: greedy code agreement and waveform SNR against fp32")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.split("\n\n")[0])
    add_bench_args(parser)
    return run_bench(parser.parse_args(argv))


def run_bench(args: argparse.Namespace) -> int:
    from tts_core.config import EngineConfig
    from tts_core.devices import configure_cpu_threads, resolve_device, resolve_lm_dtype
    from tts_core.tokenizer import TextTokenizer

    if not args.lm_config or not args.codec_config or not args.tokenizer:
        raise SystemExit("bench needs --lm-config, --codec-config and --tokenizer (the real config.json files "
                         "and tokenizer.model; default: the shared data directory, $MOSS_TTS_PARITY_DIR)")
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be at least 1, got {args.repeats}")
    if args.switch_interval_ms is not None:
        if not args.switch_interval_ms > 0:
            raise SystemExit(f"--switch-interval-ms must be > 0, got {args.switch_interval_ms}")
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    device = resolve_device(args.device)
    lm_dtype = resolve_lm_dtype(args.dtype, device)
    configure_cpu_threads(device)
    is_cuda = device.type == "cuda"
    levels = [int(x) for x in (args.streams or ("1,4,16,64" if is_cuda else "1,2")).split(",")]
    frames = args.frames or (100 if is_cuda else 40)
    devices = [resolve_device(d.strip()) for d in args.devices.split(",")] if args.devices else [device]
    models = [build_random_models(args.lm_config, args.codec_config, d, lm_dtype) for d in devices]
    codec_dtype = args.codec_dtype if is_cuda else "fp32"
    for _, codec in models:
        codec.set_compute_dtype(codec_dtype)
    lm, codec = models[0]
    if args.quantize:
        for lm_model, codec_model in models:
            quantize_lm(lm_model, args.quantize)
            quantize_codec(codec_model, args.quantize)
    tokenizer = TextTokenizer.from_file(args.tokenizer)
    # The server's KV length by default (attention cost follows it on the static path), so the
    # figures are what a server gets; --context-rows overrides.
    context_rows = args.context_rows or EngineConfig().max_context_rows
    if context_rows < args.prompt_rows + frames + 8:
        raise SystemExit(f"--context-rows {context_rows} cannot hold a {args.prompt_rows}-row prompt and {frames} frames")
    sampling = SamplingParams.greedy() if args.greedy else SamplingParams()
    with tempfile.TemporaryDirectory(prefix="moss-bench-") as cache:
        probe = bench_synthesizer(None, tokenizer, EngineConfig(max_context_rows=context_rows), lm.config, Path(cache))
        ref_frames = reference_frames_for(probe, args.prompt_rows)
        setup = {"device": str(device), "devices": [str(d) for d in devices],
                 "lm_dtype": str(lm_dtype).removeprefix("torch."), "codec_dtype": codec_dtype,
                 "quantize": args.quantize, "prompt_rows": args.prompt_rows, "frames": frames,
                 "repeats": args.repeats, "sampling": "greedy" if args.greedy else "default",
                 "context_rows": context_rows, "fused_kernels": fused_enabled(device),
                 "step_ahead": is_cuda, "engine_prepares": True, "split_readout": is_cuda,
                 "switch_interval_ms": round(sys.getswitchinterval() * 1000, 3),
                 "voice": "cold (new for every request)" if args.cold_voice else "warm (prefix cached)"}
        record = new_record("engine", args, machine_info(devices), setup)
        record["modes"] = {}
        for enforce_eager in ([False, True] if (args.eager_compare and is_cuda) else [False]):
            label = "eager" if (enforce_eager or not is_cuda) else "graphed"
            rows = []
            for level in levels:
                plan = LevelPlan(streams=level, frames=frames, prompt_rows=args.prompt_rows,
                                 repeats=args.repeats, ref_frames=ref_frames,
                                 cold_voice=args.cold_voice, sampling=sampling, enforce_eager=enforce_eager)
                row, timed = bench_level(models, devices, plan, tokenizer, context_rows, Path(cache),
                                         args.components and level == levels[0])
                if timed is not None:
                    record.setdefault("components", {})[label] = {k: round(v, 3) for k, v in timed.items()}
                rows.append(row)
                logger.info("%s streams=%d ttfp_p50_ms=%s rtf_p50=%s", label, level, row["ttfp_p50_ms"],
                            row["rtf_p50"])
            record["modes"][label] = rows
        record["setup"]["compile"] = record["modes"][next(iter(record["modes"]))][0]["compile"]
    if args.quantize and args.fidelity:
        # After the levels, so the fp32 copies never count in their memory. The random weights are
        # seeded: these are the very models the levels ran.
        fidelity = quantized_fidelity(args, device, lm_dtype, make_prompt(lm.config, args.prompt_rows), frames)
        record["fidelity"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in fidelity.items()}
    print_record(record)
    if args.json:
        write_record(record, args.json)
    return 0


def quantized_fidelity(args: argparse.Namespace, device: torch.device, lm_dtype: torch.dtype, prompt, frames: int) -> dict:
    """The quantised mode against fp32 on freshly built (identical, seeded) random models."""
    reference = build_random_models(args.lm_config, args.codec_config, device, lm_dtype)
    quantized = copy.deepcopy(reference)
    quantize_lm(quantized[0], args.quantize)
    quantize_codec(quantized[1], args.quantize)
    return compare_models(reference, quantized, prompt, frames)
