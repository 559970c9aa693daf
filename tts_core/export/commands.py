"""The `export-onnx` and `export-web` subcommands of `python -m tts_core` (parsers and handlers)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..env import env_str

logger = logging.getLogger(__name__)


def _add_common(parser: argparse.ArgumentParser) -> None:
    from .onnx_export import PRECISIONS

    parser.add_argument("out", help="output folder (created)")
    parser.add_argument("--lm", required=True, help="LM checkpoint directory (official layout) or Hub id")
    parser.add_argument("--codec", required=True, help="codec checkpoint directory or Hub id")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="fp32 (exact), fp16 (for WebGPU), int8 (LM matrices; smaller download)")
    parser.add_argument("--max-rows", type=int, default=4096,
                        help="prompt rows + frames one text chunk may reach (bounds the RoPE table)")


def _load(args: argparse.Namespace):
    from ..model.checkpoint import resolve_checkpoint_dir
    from ..model.codec_loading import load_codec
    from ..model.lm_loading import load_lm

    lm_dir = resolve_checkpoint_dir(args.lm, what="LM checkpoint")
    codec_dir = resolve_checkpoint_dir(args.codec, what="codec checkpoint")
    return lm_dir, codec_dir, load_lm(lm_dir), load_codec(codec_dir)


def _cmd_export_onnx(args: argparse.Namespace) -> int:
    from .onnx_export import ExportOptions, export_onnx

    _, _, lm, codec = _load(args)
    export_onnx(Path(args.out), lm, codec, ExportOptions(precision=args.precision, max_rows=args.max_rows))
    return 0


def _cmd_export_web(args: argparse.Namespace) -> int:
    from ..loader import _find_tokenizer
    from .onnx_export import ExportOptions
    from .web import export_web

    lm_dir, codec_dir, lm, codec = _load(args)
    tokenizer = _find_tokenizer(args.tokenizer, lm_dir)
    export_web(Path(args.out), lm, codec, codec_dir=codec_dir, tokenizer=tokenizer,
               voices_dir=Path(args.voices_dir) if args.voices_dir else None,
               options=ExportOptions(precision=args.precision, max_rows=args.max_rows))
    logger.info("serve %s with cross-origin isolation headers (see docs/BROWSER_ENGINE.md)", args.out)
    return 0


def add_export_commands(sub) -> None:
    onnx = sub.add_parser("export-onnx", help="export the LM and codec as ONNX graphs (CPU, no GPU needed)")
    _add_common(onnx)
    onnx.set_defaults(func=_cmd_export_onnx)

    web = sub.add_parser("export-web", help="build the static in-browser studio (a static Hugging Face Space)")
    _add_common(web)
    web.add_argument("--tokenizer", default=env_str("MOSS_TTS_TOKENIZER"),
                     help="SentencePiece tokenizer.model (default: the one in the LM dir) [MOSS_TTS_TOKENIZER]")
    web.add_argument("--voices-dir", default=env_str("MOSS_TTS_VOICES_DIR"),
                     help="directory of preset reference clips, encoded into the build [MOSS_TTS_VOICES_DIR]")
    web.set_defaults(func=_cmd_export_web)
