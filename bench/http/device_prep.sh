#!/usr/bin/env bash
# Prepares bench/http/device_load.sh's GPU-machine run, here, from the repo root (git-ignored output):
#
#   .whl/                 the API server's wheels (scripts/device_wheels.sh server av: fastapi,
#                         uvicorn, soundfile, soxr, PyAV, ...) and the load bench's clients (the
#                         official openai SDK and its transport, httpx at this machine's version),
#                         for CPython 3.12 on manylinux x86_64, at the versions installed here,
#                         and py-spy (the server is profiled in two extra runs);
#   outputs/device-data/  the files of the shared data the run reads (LM and codec configs, the
#                         tokenizer, the preset clips): ../shared does not travel to that machine.
#
# Gradio is not carried (with PyAV it would not fit the 64 MiB a call carries): the server runs
# there with --no-ui. Then, with the device tool:
#   command: bash bench/http/device_load.sh     carry: [".whl", "outputs/device-data"]
#
#   VENV=/work/main/.venv bash bench/http/device_prep.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${VENV:-.venv}/bin/python"
[ -x "$PY" ] || PY=python3
DATA=${MOSS_TTS_PARITY_DIR:-../shared/moss_tts_nano_data}
[ -x scripts/device_wheels.sh ] || { echo "scripts/device_wheels.sh (the server's wheel sets) is missing" >&2; exit 2; }

rm -rf .whl
bash scripts/device_wheels.sh server av
# The clients: packages the server's sets do not hold (one version of each in .whl).
CLIENT="openai httpx2 httpcore2 truststore jiter sniffio httpx httpcore anyio h11 idna"
# shellcheck disable=SC2086
pins=$("$PY" -c "import sys; from importlib.metadata import version
print(' '.join(f'{n}=={version(n)}' for n in sys.argv[1:]))" $CLIENT)
# py-spy (a static binary in a wheel): the server profiled during two extra runs (--profile).
PY_SPY=${PY_SPY_VERSION:-0.4.3}
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl $pins "py-spy==$PY_SPY"

rm -rf outputs/device-data
mkdir -p outputs/device-data/hf_checkpoint_meta outputs/device-data/codec
cp "$DATA"/hf_checkpoint_meta/* outputs/device-data/hf_checkpoint_meta/
cp "$DATA"/codec/config.json outputs/device-data/codec/
cp -r "$DATA"/presets outputs/device-data/presets
chmod -R u+w outputs/device-data

tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
wheels=$(du -cb .whl | tail -1 | cut -f1)
data=$(du -cb outputs/device-data | tail -1 | cut -f1)
total=$((tree + wheels + data))
echo "what travels: tree $((tree >> 20)) MiB + $(ls .whl/*.whl | wc -l) wheels $((wheels >> 20)) MiB" \
     "+ data $((data >> 20)) MiB = $((total >> 20)) MiB of 64"
[ "$total" -le $((64 << 20)) ] || { echo "over the 64 MiB a device call carries" >&2; exit 1; }
