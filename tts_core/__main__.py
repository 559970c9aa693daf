"""`python -m tts_core {say, make-tiny-checkpoint, make-random-checkpoint, bench, export-onnx, export-web}`
(`cli.py`), from the repository's root with its environment's Python (`.venv/bin/python`)."""

import os

# Torch work runs in more than one thread (engine, request workers); idle OpenMP teams must not
# spin on a small CPU. Set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .cli import main

raise SystemExit(main())
