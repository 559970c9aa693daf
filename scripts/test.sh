#!/usr/bin/env bash
# The one test command: sets up (or reuses) .venv, installs everything, runs pytest.
# Extra arguments go to pytest, e.g. ./scripts/test.sh -k parity -x
# Each set-up step is announced on a "test.sh:" line before it runs. As root it installs Debian's
# chromium, nginx (whose package enables its system service) and nodejs/npm with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
step() { echo "test.sh: $*"; }
if [ ! -x "$PY" ]; then
    step "creating the virtual environment $VENV"
    python3 -m venv "$VENV"
fi
# torch first and pinned: on this machine kind 2.13.0 is the CPU build on local disk;
# an unpinned torch would pull a multi-GB CUDA build.
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    step "installing torch==2.13.0 into $VENV (a few minutes, once)"
    "$PY" -m pip install -q torch==2.13.0
fi
step "installing the test requirements into $VENV (pip install -r requirements-dev.txt)"
"$PY" -m pip install -q -r requirements-dev.txt
# A Debian package the tests need: installed when root, else a warning (or, when CI requires the
# browser tests, an error: those tests then fail rather than skip).
system_package() {   # system_package PACKAGE WHAT
    if [ "$(id -u)" = "0" ]; then
        step "installing Debian's $1 system-wide with apt-get (the $2 tests need it)"
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1"
    else
        case "$(printf '%s' "${MOSS_TTS_REQUIRE_BROWSER:-}" | tr '[:upper:]' '[:lower:]')" in
            1|true|yes|on) echo "error: $1 missing and not root to install it;" \
                "MOSS_TTS_REQUIRE_BROWSER is set, so the $2 tests will fail" >&2 ;;
            *) echo "warning: $1 missing and not root; the $2 tests will be skipped" >&2 ;;
        esac
    fi
}
[ -x /usr/bin/chromium ] || system_package chromium browser
# nginx for the two-replicas test (tests/web/test_nginx_replicas.py)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || system_package nginx "nginx replica"
# The in-browser engine's tests load onnxruntime-web from node_modules (package-lock.json pins it).
if [ ! -f node_modules/onnxruntime-web/package.json ]; then
    if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
        step "installing Debian's nodejs and npm system-wide with apt-get (the browser-engine tests need them)"
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm
    fi
    if command -v npm >/dev/null 2>&1; then
        step "installing onnxruntime-web into node_modules (npm ci, as package-lock.json pins it)"
        npm ci --no-audit --no-fund --ignore-scripts
    else
        echo "warning: npm missing; the browser-engine tests will fail or skip" >&2
    fi
fi
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
step "set-up done; running pytest $*"
exec "$PY" -m pytest "$@"
