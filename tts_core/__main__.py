"""`python -m tts_core {say, serve, make-tiny-checkpoint, bench}`.

`serve` (the web server, with app.py's flags) is dispatched here, in the entry point: the library
modules of tts_core never import the web wing.
"""

import os
import sys

# Torch work runs in more than one thread (engine, request workers); idle OpenMP teams must not
# spin on a small CPU. Set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

if sys.argv[1:2] == ["serve"]:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from .web.main import main as serve

    serve(sys.argv[2:], prog="python -m tts_core serve")
    raise SystemExit(0)

from .cli import main

raise SystemExit(main())
