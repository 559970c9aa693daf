#!/usr/bin/env bash
# The one run command: sets up (or reuses) .venv, installs the runtime deps, starts the app.
# Arguments go to app.py, e.g. ./scripts/run.sh --port 7861 --device cpu
#
# torch is installed only when the venv has none, in this order:
#   TORCH_SPEC         your choice, as pip arguments (e.g. TORCH_SPEC=torch==2.13.0)
#   a pinned local wheel: torch-2.13.0*.whl in $TORCH_WHEEL_DIR (default /opt/wheels, this project's machines)
#   an NVIDIA GPU (nvidia-smi or the driver present): the default (CUDA) build from PyPI
#   otherwise the CPU build from PyTorch's CPU index (~200 MB instead of several GB of CUDA libraries)
# RUN_SH_PLAN=1 prints the torch choice and exits (nothing installed).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
TORCH_PIN="2.13.0"
CPU_INDEX="https://download.pytorch.org/whl/cpu"

has_nvidia_gpu() {
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        return 0
    fi
    [ -e /proc/driver/nvidia/version ]
}

torch_args() {
    if [ -n "${TORCH_SPEC:-}" ]; then
        echo "$TORCH_SPEC"
        return
    fi
    local wheel
    wheel="$(ls "${TORCH_WHEEL_DIR:-/opt/wheels}"/torch-"$TORCH_PIN"*.whl 2>/dev/null | head -n 1 || true)"
    if [ -n "$wheel" ]; then
        echo "$wheel"
    elif has_nvidia_gpu; then
        echo "torch"
    else
        echo "torch --index-url $CPU_INDEX"
    fi
}

offline_help() {
    cat >&2 <<EOF
error: could not install $1 (no network to the package index?).
- Point TORCH_SPEC at a wheel you have, e.g. TORCH_SPEC=/path/to/torch-$TORCH_PIN-...whl ./scripts/run.sh
- Without the model download, once .venv is set up (README, "Run it"): a small random model (it babbles,
  but every part of the app runs):
  .venv/bin/python -m tts_core make-tiny-checkpoint /tmp/tiny
  ./scripts/run.sh --lm /tmp/tiny/lm --codec /tmp/tiny/codec --voices-dir /tmp/tiny/voices
EOF
}

if [ "${RUN_SH_PLAN:-}" = "1" ]; then
    echo "torch: $(torch_args)"
    exit 0
fi
if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
fi
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    # shellcheck disable=SC2046  # the arguments are meant to split (a spec plus options)
    if ! "$PY" -m pip install -q $(torch_args); then
        offline_help "torch ($(torch_args))"
        exit 1
    fi
fi
if ! "$PY" -m pip install -q -r requirements.txt; then
    offline_help "the requirements (requirements.txt)"
    exit 1
fi
export GRADIO_ANALYTICS_ENABLED="${GRADIO_ANALYTICS_ENABLED:-False}"
exec "$PY" app.py "$@"
