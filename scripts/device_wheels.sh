#!/usr/bin/env bash
# Prepares a GPU-machine run of the web server (bench/device_http_load.sh), here, from the repo root:
#
#   .whl/                 wheels the GPU image lacks (python 3.12, manylinux x86_64): the web server
#                         (fastapi, uvicorn, PyAV, soxr, soundfile, ...) and the official openai SDK,
#                         at the versions of this machine's virtualenv (one version of each);
#   outputs/device-data/  the files of the shared data a GPU run reads (the LM and codec configs,
#                         the tokenizer, the preset clips): ../shared does not travel to that machine.
#
# Both are git-ignored; the device command carries them: carry [".whl", "outputs/device-data"].
# Gradio is not among the wheels (it and its dependencies would not fit the 64 MiB a call carries):
# the server runs there with --no-ui. Usage:
#
#   VENV=/work/main/.venv bash scripts/device_wheels.sh [EXTRA_PACKAGE==VERSION ...]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
DATA=${MOSS_TTS_PARITY_DIR:-../shared/moss_tts_nano_data}
# Distribution names: the server's and the SDK's runtime dependencies missing on the GPU image, or
# older there than these packages need (typing_extensions, anyio, httpx: carried at this machine's
# versions so both machines run the same client and server code).
PACKAGES=(fastapi starlette pydantic pydantic_core annotated-types typing-inspection typing_extensions
          annotated-doc opentelemetry-api uvicorn click h11 anyio idna httpx httpcore
          av soundfile cffi pycparser soxr
          openai httpx2 httpcore2 truststore jiter sniffio)

version_of() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

mkdir -p .whl
rm -f .whl/*.whl
for name in "${PACKAGES[@]}"; do
  spec="$name==$(version_of "$name")"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$spec" 2>&1 | grep -v "^WARNING" || true
done
for spec in "$@"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$spec" 2>&1 | grep -v "^WARNING" || true
done
count=$(ls .whl/*.whl | wc -l)
if [ "$count" -lt "${#PACKAGES[@]}" ]; then
  echo "only $count of ${#PACKAGES[@]} wheels were downloaded: see the messages above" >&2
  exit 1
fi

rm -rf outputs/device-data
mkdir -p outputs/device-data/hf_checkpoint_meta outputs/device-data/codec
cp "$DATA"/hf_checkpoint_meta/* outputs/device-data/hf_checkpoint_meta/
cp "$DATA"/codec/config.json outputs/device-data/codec/
cp -r "$DATA"/presets outputs/device-data/presets
chmod -R u+w outputs/device-data

tracked=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
wheels=$(du -cb .whl | tail -1 | cut -f1)
data=$(du -cb outputs/device-data | tail -1 | cut -f1)
total=$((tracked + wheels + data))
echo "what travels: tree $((tracked / 1048576)) MiB + wheels $((wheels / 1048576)) MiB + data $((data / 1048576)) MiB" \
     "= $((total / 1048576)) MiB of 64"
if [ "$total" -gt $((64 * 1048576)) ]; then
  echo "over the 64 MiB a device call carries" >&2
  exit 1
fi
