"""The `export-onnx` and `export-web` subcommands of `python -m tts_core` (parsers and handlers)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..env import env_str

logger = logging.getLogger(__name__)


def _add_common(parser: argparse.ArgumentParser, default_precisions: str) -> None:
    parser.add_argument("out", help="output folder (created)")
    parser.add_argument("--lm", required=True, help="LM checkpoint directory (official layout) or Hub id")
    parser.add_argument("--codec", required=True, help="codec checkpoint directory or Hub id")
    parser.add_argument("--precision", default=default_precisions,
                        help="comma-separated precisions to write: fp32 (exact), int8 (wasm: LM matrices and "
                             f"tables int8, smaller and faster), fp16 (WebGPU) (default {default_precisions})")
    parser.add_argument("--quantize-codec", action="store_true",
                        help="int8 also for the codec decoder (smaller, not exact audio; see docs/BROWSER_ENGINE.md)")
    parser.add_argument("--max-rows", type=int, default=4096,
                        help="prompt rows + frames one text chunk may reach (bounds the RoPE table)")


def _load(args: argparse.Namespace):
    from ..model.checkpoint import resolve_checkpoint_dir
    from ..model.codec_loading import load_codec
    from ..model.lm_loading import load_lm

    lm_dir = resolve_checkpoint_dir(args.lm, what="LM checkpoint")
    codec_dir = resolve_checkpoint_dir(args.codec, what="codec checkpoint")
    return lm_dir, codec_dir, load_lm(lm_dir), load_codec(codec_dir)


def _options(args: argparse.Namespace):
    from .onnx_export import ExportOptions

    try:
        return ExportOptions(precisions=args.precision, max_rows=args.max_rows, quantize_codec=args.quantize_codec)
    except ValueError as error:
        raise SystemExit(f"--precision/--max-rows: {error}") from None


def _cmd_export_onnx(args: argparse.Namespace) -> int:
    from .onnx_export import export_onnx

    options = _options(args)
    _, _, lm, codec = _load(args)
    export_onnx(Path(args.out), lm, codec, options)
    return 0


def _cmd_export_web(args: argparse.Namespace) -> int:
    from ..loader import _find_tokenizer
    from .web import export_web

    options = _options(args)
    lm_dir, codec_dir, lm, codec = _load(args)
    tokenizer = _find_tokenizer(args.tokenizer, lm_dir)
    export_web(Path(args.out), lm, codec, codec_dir=codec_dir, tokenizer=tokenizer,
               voices_dir=Path(args.voices_dir) if args.voices_dir else None,
               options=options)
    logger.info("try it locally: python -m tts_core serve-web %s  (serves it with the headers wasm threads need)",
                args.out)
    return 0


def _cmd_serve_web(args: argparse.Namespace) -> int:
    from .serve import serve_forever

    try:
        serve_forever(Path(args.out), args.host, args.port)
    except (FileNotFoundError, OSError) as error:
        raise SystemExit(f"serve-web: {error}") from None
    return 0


def add_export_commands(sub) -> None:
    onnx = sub.add_parser("export-onnx", help="export the LM and codec as ONNX graphs (CPU, no GPU needed)")
    _add_common(onnx, "fp32")
    onnx.set_defaults(func=_cmd_export_onnx)

    web = sub.add_parser("export-web", help="build the static in-browser studio (a static Hugging Face Space)")
    _add_common(web, "int8,fp16")
    web.add_argument("--tokenizer", default=env_str("MOSS_TTS_TOKENIZER"),
                     help="SentencePiece tokenizer.model (default: the one in the LM dir) [MOSS_TTS_TOKENIZER]")
    web.add_argument("--voices-dir", default=env_str("MOSS_TTS_VOICES_DIR"),
                     help="directory of preset reference clips, encoded into the build [MOSS_TTS_VOICES_DIR]")
    web.set_defaults(func=_cmd_export_web)

    serve = sub.add_parser("serve-web", help="serve an export-web build locally with the headers wasm threads need")
    serve.add_argument("out", help="the build folder")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(func=_cmd_serve_web)
