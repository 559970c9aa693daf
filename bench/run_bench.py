"""Benchmark entry point: same as `python -m tts_core bench` (see bench/lib/ and docs/PERFORMANCE.md)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tts_core.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", *sys.argv[1:]]))
