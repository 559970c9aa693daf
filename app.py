"""MOSS-TTS-Nano Studio: `python app.py` serves the Gradio page, the streaming route and the OpenAI API.

Thin wiring: the flags, the service and the app live in `studio/` (`python app.py --help`
lists every flag).
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported anywhere
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# Torch work happens in several threads here (loader, engine, request workers), each with its own
# OpenMP team; spinning idle teams starved the engine on a 2-core box (RTF 4.3 instead of 0.2).
# Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from studio.main import main

if __name__ == "__main__":
    main()
