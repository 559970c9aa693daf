"""The bench's command line (added to `python -m tts_core bench` by cli.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tts_core.env import env_str


def default_config_path(*parts: str) -> str | None:
    """A file of the shared data directory ($MOSS_TTS_PARITY_DIR, default ../shared/moss_tts_nano_data
    from the repo root), or None when it is not there."""
    root = env_str("MOSS_TTS_PARITY_DIR") or str(Path(__file__).resolve().parents[3] / "shared"
                                                         / "moss_tts_nano_data")
    path = Path(root, *parts)
    return str(path) if path.is_file() else None


def add_bench_args(parser: argparse.ArgumentParser) -> None:
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
