"""Command line of the library: `python -m tts_core {say, make-tiny-checkpoint, make-random-checkpoint,
bench, export-onnx, export-web}`, run from the repository's root with its environment's Python
(`.venv/bin/python`, which `scripts/run.sh` makes). The web server is `python app.py`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from .config import DEFAULT_CODEC_ID, DEFAULT_LM_ID, LoadConfig
from .env import env_str
from .errors import TTSError

logger = logging.getLogger("tts_core.cli")

SERVE_HELP = "the web studio and HTTP API: python app.py (--help lists its flags)"


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """--lm, --codec, --tokenizer, --voices-dir, --device, --dtype: every entry point that loads the
    model takes them (`say`, the web server's `studio/flags.py`), each with its environment twin."""
    parser.add_argument("--lm", default=env_str("MOSS_TTS_LM", DEFAULT_LM_ID),
                        help="LM: Hugging Face repo id or local directory [MOSS_TTS_LM]")
    parser.add_argument("--codec", default=env_str("MOSS_TTS_CODEC", DEFAULT_CODEC_ID),
                        help="codec: Hugging Face repo id or local directory [MOSS_TTS_CODEC]")
    parser.add_argument("--tokenizer", default=env_str("MOSS_TTS_TOKENIZER"),
                        help="SentencePiece tokenizer.model (default: the one in the LM dir) [MOSS_TTS_TOKENIZER]")
    parser.add_argument("--voices-dir", default=env_str("MOSS_TTS_VOICES_DIR"),
                        help="directory of preset reference clips [MOSS_TTS_VOICES_DIR]")
    parser.add_argument("--device", default=env_str("MOSS_TTS_DEVICE", "auto"),
                        help="auto, cpu, cuda, cuda:1 [MOSS_TTS_DEVICE]")
    parser.add_argument("--dtype", default=env_str("MOSS_TTS_DTYPE", "auto"),
                        help="auto, float32, bfloat16 [MOSS_TTS_DTYPE]")


def model_load_config(args: argparse.Namespace, **more: Any) -> LoadConfig:
    """The `LoadConfig` the model flags (`add_model_flags`) say, with `more` of its fields."""
    return LoadConfig(lm=args.lm, codec=args.codec, tokenizer=args.tokenizer, voices_dir=args.voices_dir,
                      device=args.device, dtype=args.dtype, **more)


def _cmd_say(args: argparse.Namespace) -> int:
    from .audio.io import encode_audio
    from .config import EngineConfig, SamplingParams
    from .synthesizer import Synthesizer
    from .types import SynthesisRequest, Voice

    synth = Synthesizer.from_pretrained(load=model_load_config(args), engine_config=EngineConfig(max_active_streams=1),
                                        warmup=False, report=lambda line: logger.info("%s", line))
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
