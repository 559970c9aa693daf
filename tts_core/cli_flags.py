"""Command-line flags shared by every entry point that loads the model (`say`, the web server).

Each flag has an environment twin, read through `tts_core.env`; default checkpoints come from
`tts_core.config`.
"""

from __future__ import annotations

import argparse

from .config import DEFAULT_CODEC_ID, DEFAULT_LM_ID
from .env import env_str


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """--lm, --codec, --tokenizer, --voices-dir, --device, --dtype."""
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
