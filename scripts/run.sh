#!/usr/bin/env bash
# The one run command: sets up (or reuses) .venv, installs the runtime deps, starts the app.
# Arguments go to app.py, e.g. ./scripts/run.sh --port 7861 --device cpu
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
fi
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    # TORCH_SPEC lets a CPU-only machine pick a CPU wheel, e.g. TORCH_SPEC=torch==2.13.0
    "$PY" -m pip install -q "${TORCH_SPEC:-torch}"
fi
"$PY" -m pip install -q -r requirements.txt
export GRADIO_ANALYTICS_ENABLED="${GRADIO_ANALYTICS_ENABLED:-False}"
exec "$PY" app.py "$@"
