#!/usr/bin/env bash
# Wheels of the web server's packages for a GPU machine that has torch but no package index
# (this workplace's H200 image: no gradio, fastapi, uvicorn, soundfile, soxr, av or pedalboard).
# Downloads them into .whl/ (git-ignored) for CPython 3.12 on manylinux x86_64, at the versions
# installed here (the ones the tests ran with), without their own dependencies (those listed below
# are the ones the image lacks).
#
#   ./scripts/device_wheels.sh            # server + page: python app.py as users run it (~40 MB)
#   ./scripts/device_wheels.sh server av  # API only (--no-ui) with mp3/opus/aac output (~47 MB)
#
# Sets (the tree that travels to the device is limited to 64 MiB, so all four do not fit at once):
#   server      fastapi, uvicorn and what they need, soundfile and soxr (reading clips),
#               swagger-ui-py (/docs offline)                                           ~6 MB
#   ui          gradio and what it needs beyond the image                                 ~34 MB
#   av          PyAV: mp3 / opus / aac / flac encoding (formats other than pcm, wav, f32)  ~36 MB
#   stretch     pedalboard: `speed` other than 1                                          ~5 MB
#   test        pytest and its plugins, and what the GPU tests' ZeroGPU child reads clips with ~6 MB
# Without av the server still starts and streams f32, pcm and wav; without stretch `speed` is refused.
#
# On the device, before the command that needs them (carry: [".whl"]):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${VENV:-.venv}/bin/python"
[ -x "$PY" ] || PY=python3

SERVER="fastapi starlette pydantic pydantic-core annotated-types typing-inspection typing-extensions
        opentelemetry-api uvicorn python-multipart soundfile cffi pycparser soxr swagger-ui-py pyyaml"
UI="gradio gradio-client hf-gradio brotli groovy orjson pydub safehttpx semantic-version tomlkit pytz"
AV="av"
STRETCH="pedalboard"
TEST="pytest pluggy iniconfig pytest-timeout packaging pygments soundfile cffi pycparser soxr"

sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(server ui)
names=""
for set in "${sets[@]}"; do
  case "$set" in
    server) names+=" $SERVER" ;;
    ui) names+=" $UI" ;;
    av) names+=" $AV" ;;
    stretch) names+=" $STRETCH" ;;
    test) names+=" $TEST" ;;
    *) echo "unknown set '$set': use server, ui, av, stretch, test" >&2; exit 2 ;;
  esac
done

# name==version for each, from the environment the tests ran in
pins=$("$PY" - $names <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
missing, pins = [], []
for name in sys.argv[1:]:
    try:
        pins.append(f"{name}=={version(name)}")
    except PackageNotFoundError:
        missing.append(name)
if missing:
    sys.exit(f"not installed here (run ./scripts/test.sh once, or set VENV): {' '.join(missing)}")
print(" ".join(pins))
EOF
)

mkdir -p .whl
platforms=""
for tag in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
           manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=" --platform ${tag}_x86_64"
done
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $platforms -d .whl $pins
du -ch .whl/*.whl | tail -1
