"""Command line of the library: `python -m tts_core {say, make-tiny-checkpoint, make-random-checkpoint,
bench, export-onnx, export-web}`, run from the repository's root with its environment's Python
(`.venv/bin/python`, which `scripts/run.sh` makes). The web server is `python app.py`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .cli_flags import add_model_flags
from .env import env_str
from .errors import TTSError

logger = logging.getLogger("tts_core.cli")

SERVE_HELP = "the web studio and HTTP API: python app.py (--help lists its flags)"


def _cmd_say(args: argparse.Namespace) -> int:
    from .audio.io import encode_audio
    from .config import EngineConfig, SamplingParams
    from .synthesizer import Synthesizer
    from .types import SynthesisRequest, Voice

    synth = Synthesizer.from_pretrained(args.lm, args.codec, device=args.device, dtype=args.dtype,
                                        tokenizer=args.tokenizer, voices_dir=args.voices_dir,
                                        engine_config=EngineConfig(max_active_streams=1), warmup=False,
                                        report=lambda line: logger.info("%s", line))
    try:
        if args.ref_audio:
            voice = Voice.from_audio(args.ref_audio, transcript=args.ref_text)
        else:
            voice = Voice.preset(args.voice) if args.voice else None
        mode = "continuation" if args.ref_text else "voice_clone"
        sampling = SamplingParams.greedy() if args.greedy else SamplingParams()
        request = SynthesisRequest(text=args.text, voice=voice, mode=mode, sampling=sampling, seed=args.seed,
                                   max_frames=args.max_frames)
        result = synth.synthesize(request)
    finally:
        synth.close()
    fmt = Path(args.output).suffix.lstrip(".").lower() or "wav"
    Path(args.output).write_bytes(encode_audio(result.pcm, result.sample_rate, fmt))
    t = result.timings
    logger.info("wrote %s: %.2f s of audio in %.2f s (first audio after %.3f s, RTF %.3f)", args.output,
                t.audio_s, t.elapsed_s, t.first_audio_s or float("nan"), t.rtf or float("nan"))
    return 0


def _cmd_make_tiny(args: argparse.Namespace) -> int:
    from .tiny import make_tiny_checkpoint, shared_data_dir
    from .voices import load_catalog
    from .voices.sources import copy_verified_clips

    directory = Path(args.directory)
    lm_dir, codec_dir = make_tiny_checkpoint(directory, tokenizer=args.tokenizer, seed=args.seed)
    logger.info("tiny LM written to %s, tiny codec to %s", lm_dir, codec_dir)
    # The presets' clips beside them (the shared data's, verified), so --voices-dir needs no download.
    voices = directory / "voices"
    copied = copy_verified_clips(load_catalog(), shared_data_dir() / "presets", voices)
    logger.info("%d preset clips copied to %s%s", len(copied), voices, "" if copied else
                " (none in the shared data: presets are then downloaded on first use; cloning works either way)")
    print(f"--lm {lm_dir} --codec {codec_dir} --voices-dir {voices}")
    return 0


def _cmd_make_random(args: argparse.Namespace) -> int:
    from .tiny import _find_tokenizer, save_random_checkpoint, shared_data_dir

    data = shared_data_dir()
    lm_dir, codec_dir = save_random_checkpoint(
        Path(args.directory), lm_config=args.lm_config or data / "hf_checkpoint_meta" / "config.json",
        codec_config=args.codec_config or data / "codec" / "config.json", tokenizer=_find_tokenizer(args.tokenizer))
    logger.info("full-size random LM written to %s, codec to %s", lm_dir, codec_dir)
    print(f"--lm {lm_dir} --codec {codec_dir}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from bench.lib import run_bench

    return run_bench(args)


def _no_bench(args: argparse.Namespace) -> int:
    logger.error("the benchmark is part of the repository, not of the installed package: run "
                 "`python bench/run_bench.py` (or `python -m tts_core bench`) from a checkout's root")
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tts_core", description=__doc__.split("\n\n")[0],
                                     epilog=SERVE_HELP)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    say = sub.add_parser("say", help="synthesize text to an audio file")
    say.add_argument("text")
    say.add_argument("--voice", help="preset name (default: the catalog's default voice)")
    say.add_argument("--ref-audio", help="reference clip to clone (wav/flac/mp3/ogg)")
    say.add_argument("--ref-text", help="transcript of --ref-audio (switches to continuation mode)")
    say.add_argument("-o", "--output", default="out.wav", help="output file; format from the suffix")
    say.add_argument("--seed", type=int)
    say.add_argument("--greedy", action="store_true", help="argmax decoding (deterministic)")
    say.add_argument("--max-frames", type=int)
    add_model_flags(say)
    say.set_defaults(func=_cmd_say)

    tiny = sub.add_parser("make-tiny-checkpoint", help="write a small random LM + codec pair for offline runs")
    tiny.add_argument("directory")
    tiny.add_argument("--tokenizer", default=env_str("MOSS_TTS_TOKENIZER"),
                      help="the real tokenizer.model to put next to the tiny LM (default: the shared data's, "
                           "MOSS_TTS_PARITY_DIR or ../shared/moss_tts_nano_data)")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=_cmd_make_tiny)

    full = sub.add_parser("make-random-checkpoint",
                          help="write full-size models with random weights (real configs) for start-up benchmarks")
    full.add_argument("directory")
    full.add_argument("--lm-config", help="LM config.json (default: the shared data's hf_checkpoint_meta/config.json)")
    full.add_argument("--codec-config", help="codec config.json (default: the shared data's codec/config.json)")
    full.add_argument("--tokenizer", default=env_str("MOSS_TTS_TOKENIZER"), help="tokenizer.model to put next to the LM")
    full.set_defaults(func=_cmd_make_random)

    bench = sub.add_parser("bench", help="measure TTFP / RTF with full-size random weights (from a checkout)")
    try:  # the measurement package lives in the repository (bench/lib), not in the installed package
        from bench.lib import add_bench_args
    except ImportError:
        bench.set_defaults(func=_no_bench)
    else:
        add_bench_args(bench)
        bench.set_defaults(func=_cmd_bench)

    from .export.commands import add_export_commands

    add_export_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except TTSError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
