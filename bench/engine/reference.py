"""Side by side in one process: the upstream PyTorch MOSS-TTS-Nano against our engine, one stream.

Both sides get full-size models built from the real config.json files with seeded random weights,
the same 200-row voice-clone-shaped prompt (`bench.lib.models.make_prompt`), the same sampling defaults
(audio T 0.8 / top-p 0.95 / top-k 25 / repetition penalty 1.2, text T 1.0) and exactly `--frames`
frames (the stop decision is still computed but never taken). Figures are medians over `--repeats`
runs, with min-max; the sides alternate run by run so a noisy neighbour hits both alike. Nothing
here asserts a timing.

What is timed
- reference: `NanoTTSService.synthesize_stream` of the upstream runtime (moss_tts_nano_runtime.py),
  the call the upstream app's realtime-streaming route makes. It runs the remote-code loop
  `MossTTSNanoForCausalLM.inference_stream`: full prefill, one frame per step with the local
  transformer, and streaming codec `batch_decode(streaming=True)` under the upstream decode-budget
  policy (1 frame first on CPU; on CUDA the runtime's own 4/6/8/12-frame policy). The runtime picks
  dtype (fp32 CPU, bf16 CUDA), attention (sdpa, flash_attention_2 when flash_attn is installed) and
  the codec compute dtype itself. Not timed on that side: reading and encoding a prompt clip (the
  upstream app re-encodes its voice clip on every request; our engine keeps voice codes), so the
  reference's TTFP here is a lower bound of what its app shows.
- ours: `bench.engine.levels.bench_level` through the real engine (scheduler, LM steps, streaming codec),
  1 stream; `ours` pays the full prefill like the reference, `ours_voice_cache` reuses the voice's
  prompt-prefix KV as our server does for a voice used before (on CUDA only bursts of several prompts copy it).
TTFP = call -> first audio chunk; RTF = (call -> last audio chunk) / audio seconds.

The reference directory (never committed; keep it outside the repo or in a git-ignored folder)
holds the unmodified upstream files; they are found by name anywhere under it:
    lm/        modeling_moss_tts_nano.py, configuration_moss_tts_nano.py, gpt2_decoder.py, prompting.py,
               tokenization_moss_tts_nano.py, __init__.py  (HF OpenMOSS-Team/MOSS-TTS-Nano remote
               code; mirrored on GitHub in ml-inory/moss-tts-nano.axera models/llm/repo/)
    codec/     modeling_moss_audio_tokenizer.py, configuration_moss_audio_tokenizer.py, __init__.py
               (HF OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano; same mirror, models/codec/hf_code/)
    upstream/  moss_tts_nano_runtime.py and moss_tts_nano/ from GitHub OpenMOSS/MOSS-TTS-Nano
An optional SOURCES.txt there (repo, path, commit per part) is copied into the JSON.

Setup on a CPU machine (a venv of its own: transformers is not a project dependency):
    python3 -m venv /work/venv-ref
    /work/venv-ref/bin/pip install torch==2.13.0 transformers==5.17.0 safetensors sentencepiece numpy
torchaudio is not needed (a stand-in covers its two uses in the LM file, neither of them timed).
A GPU machine with torch + transformers + safetensors + sentencepiece + numpy needs nothing more;
where ../shared is absent, carry the data folder too and set MOSS_TTS_PARITY_DIR to it (the LM
config's folder must also hold tokenizer.model, which the upstream loop loads).

Usage (from the repo root):
    /work/venv-ref/bin/python -m bench.engine.reference --reference-dir /work/reference --device cpu \
        --threads 1 --frames 40 --repeats 3 --json outputs/reference_cpu_t1.json
    python -m bench.engine.reference --reference-dir reference_code --device cuda --frames 100 --json ref_gpu.json
`--reference-dir` defaults to $MOSS_TTS_REFERENCE_DIR; the configs default to the shared data.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import statistics
import tempfile
from pathlib import Path

logger = logging.getLogger("bench.reference")
SIDES = ("reference", "ours", "ours_voice_cache")  # fp32; other precisions add ours_<p>[_voice_cache]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from bench.lib.args import default_config_path

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reference-dir", default=os.environ.get("MOSS_TTS_REFERENCE_DIR"),
                        help="folder with the unmodified upstream code (default $MOSS_TTS_REFERENCE_DIR)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU: torch.set_num_threads for both sides (default: leave torch's choice)")
    parser.add_argument("--frames", type=int, default=40, help="frames per stream (12.5 frames = 1 s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side (after one warm-up)")
    parser.add_argument("--prompt-rows", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="weights seed; run i samples with seed+1000+i")
    parser.add_argument("--lm-config", default=default_config_path("hf_checkpoint_meta", "config.json"))
    parser.add_argument("--codec-config", default=default_config_path("codec", "config.json"))
    parser.add_argument("--precisions", default="fp32",
                        help="CPU weight precisions of our side, comma-separated (fp32, fp16, int8)")
    parser.add_argument("--json", help="write the record to this file")
    args = parser.parse_args(argv)
    problems = check_args(args)
    if problems:
        parser.error("; ".join(problems))
    return args


def check_args(args: argparse.Namespace) -> list[str]:
    """Every problem with the arguments, each naming the flag and the fix."""
    problems = []
    if not args.reference_dir:
        problems.append("--reference-dir is required (or set MOSS_TTS_REFERENCE_DIR) and must point at the "
                        "unmodified upstream code")
    for name, low in (("frames", 1), ("repeats", 1), ("prompt_rows", 80)):
        if getattr(args, name) < low:
            problems.append(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    bad = [p for p in args.precisions.split(",") if p.strip() not in ("fp32", "fp16", "int8")]
    if bad:
        problems.append(f"--precisions: unknown {', '.join(bad)}; use fp32, fp16, int8")
    elif args.device != "cpu" and args.precisions.strip() != "fp32":
        problems.append("--precisions other than fp32 are CPU modes; drop it for cuda")
    if args.threads is not None and args.threads < 1:
        problems.append(f"--threads must be >= 1, got {args.threads}")
    if args.threads is not None and args.device != "cpu":
        problems.append("--threads applies to --device cpu only; drop it for cuda")
    for name in ("lm_config", "codec_config"):
        value = getattr(args, name)
        if not value or not Path(value).is_file():
            problems.append(f"--{name.replace('_', '-')} {value!r} is not a file; pass the real config.json")
    return problems


def summarize(values: list[float]) -> dict:
    """Median with the range: the figure to quote and how far single runs strayed."""
    if not values:
        raise ValueError("summarize needs at least one value")
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def side_summary(runs: list[dict]) -> dict:
    return {"ttfp_ms": summarize([r["ttfp_ms"] for r in runs]), "rtf": summarize([r["rtf"] for r in runs]),
            "runs": runs}


def ratios(sides: dict) -> dict:
    """reference / ours for each of our variants (above 1: ours is faster)."""
    ref = sides.get("reference")
    if not ref:
        return {}
    out = {}
    for name in sides:
        if name != "reference":
            out[f"reference_over_{name}"] = {
                key: ref[key]["median"] / sides[name][key]["median"] for key in ("ttfp_ms", "rtf")}
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(device: str) -> dict:
    import torch

    try:
        from importlib.metadata import version

        transformers_version = version("transformers")
    except Exception:  # the reference needs it; the record should still say it was missing
        transformers_version = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(), "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers_version,
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else None,
    }


def build_record(args: argparse.Namespace, machine: dict, reference_info: dict, sides: dict) -> dict:
    return {
        "kind": "reference_side_by_side",
        "machine": machine,
        "settings": {"device": args.device, "threads": args.threads, "frames": args.frames,
                     "repeats": args.repeats, "prompt_rows": args.prompt_rows, "seed": args.seed,
                     "streams": 1, "sampling": "upstream defaults (do_sample, audio T0.8 p0.95 k25 rep1.2)"},
        "reference": reference_info,
        "sides": sides,
        "ratios": ratios(sides),
    }


def format_table(record: dict) -> str:
    m, s = record["machine"], record["settings"]
    lines = [f"# {s['device']} ({m['gpu'] or m['cpu']}), torch {m['torch']}, threads {m['torch_threads']}, "
             f"{s['frames']} frames, prompt {s['prompt_rows']} rows, {s['repeats']} runs, {m['date']}",
             "| side | TTFP ms median (min-max) | RTF median (min-max) |", "|---|---|---|"]
    for name, side in record["sides"].items():
        t, r = side["ttfp_ms"], side["rtf"]
        lines.append(f"| {name} | {t['median']:.0f} ({t['min']:.0f}-{t['max']:.0f}) "
                     f"| {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f}) |")
    for name, ratio in record["ratios"].items():
        lines.append(f"{name}: TTFP x{ratio['ttfp_ms']:.2f}, RTF x{ratio['rtf']:.2f}")
    return "\n".join(lines)


class OursStream:
    """Our engine through the bench's own level runner (random weights, real engine, one stream,
    timed from the `Synthesizer.stream()` call): a new voice per run = full prefill; the same voice
    again = its prompt prefix reused, as our server does."""

    def __init__(self, args: argparse.Namespace, device, prompt, precision: str = "fp32"):
        import torch

        from bench.lib.models import build_random_models
        from tts_core.devices import resolve_lm_dtype
        from tts_core.model.quant import quantize_codec, quantize_lm
        from tts_core.tokenizer import TextTokenizer

        self.device = torch.device(device)
        lm, codec = build_random_models(args.lm_config, args.codec_config, self.device,
                                        resolve_lm_dtype("auto", self.device))
        codec.set_compute_dtype("fp32")  # the bench's default on CUDA too
        if precision != "fp32":
            quantize_lm(lm, precision)
            quantize_codec(codec, precision)
        self.models = [(lm, codec)]
        self.prompt_rows = len(prompt)
        self.tokenizer = TextTokenizer.from_file(str(Path(args.lm_config).parent / "tokenizer.model"))
        self._cache = tempfile.TemporaryDirectory(prefix="moss_ours_bench_")

    def run(self, frames: int, voice_cache: bool) -> dict:
        from bench.engine.levels import LevelPlan, bench_level, bench_synthesizer, reference_frames_for
        from tts_core.config import EngineConfig, SamplingParams

        context_rows = self.prompt_rows + frames + 40
        probe = bench_synthesizer(None, self.tokenizer, EngineConfig(max_context_rows=context_rows),
                                  self.models[0][0].config, Path(self._cache.name))
        plan = LevelPlan(streams=1, frames=frames, prompt_rows=self.prompt_rows, repeats=1,
                         ref_frames=reference_frames_for(probe, self.prompt_rows), cold_voice=not voice_cache,
                         sampling=SamplingParams(), enforce_eager=False)
        row, _ = bench_level(self.models, [self.device], plan, self.tokenizer, context_rows,
                             Path(self._cache.name), components=False)
        return {"ttfp_ms": row["ttfp_p50_ms"]["median"], "rtf": row["rtf_p50"]["median"]}

    def close(self) -> None:
        self._cache.cleanup()


def precisions(args: argparse.Namespace) -> list[str]:
    return [p.strip() for p in args.precisions.split(",") if p.strip()]


def run(args: argparse.Namespace) -> dict:
    import torch

    from bench.engine.reference_upstream import ReferenceStream, fingerprint, locate
    from bench.lib.models import make_prompt
    from tts_core.model.lm_config import LMConfig

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU here; use --device cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    paths = locate(args.reference_dir)
    prompt = make_prompt(LMConfig.from_json(args.lm_config), args.prompt_rows)
    with tempfile.TemporaryDirectory(prefix="moss_ref_bench_") as out_dir:
        reference = ReferenceStream(paths, Path(args.lm_config), Path(args.codec_config), torch.device(args.device),
                                    prompt, args.seed, Path(out_dir))
        ours = {p: OursStream(args, args.device, prompt, p) for p in precisions(args)}
        warm = min(args.frames, 8)
        reference.run(warm, args.seed + 999)
        runs: dict[str, list[dict]] = {"reference": []}
        for i in range(args.repeats):  # the sides alternate, so a slow moment hits them alike
            fig = reference.run(args.frames, args.seed + 1000 + i)
            runs["reference"].append({"ttfp_ms": 1000 * fig.ttfp_s, "rtf": fig.rtf, "audio_s": fig.audio_s})
            for precision, side in ours.items():
                name = "ours" if precision == "fp32" else f"ours_{precision}"
                runs.setdefault(name, []).append(side.run(args.frames, voice_cache=False))
                runs.setdefault(f"{name}_voice_cache", []).append(side.run(args.frames, voice_cache=True))
            logger.info("run %d: %s", i, {k: v[-1] for k, v in runs.items()})
        for side in ours.values():
            side.close()
        sources = next((p for p in Path(args.reference_dir).rglob("SOURCES.txt")), None)
        reference_info = {"timed": "moss_tts_nano_runtime.NanoTTSService.synthesize_stream "
                                   "(-> MossTTSNanoForCausalLM.inference_stream)",
                          "runtime_settings": reference.settings(), "files_sha256_16": fingerprint(paths),
                          "sources": sources.read_text().strip() if sources else None}
    sides = {name: side_summary(values) for name, values in runs.items()}
    return build_record(args, machine_info(args.device), reference_info, sides)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    record = run(args)
    print(format_table(record))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
