#!/usr/bin/env bash
# Issue 33's H200 run, one command of at most ~9 minutes: the API under 64 ... 384 concurrent
# listeners on full-size random weights, beside the in-process engine of the same model.
#
# Prepare here (once): VENV=/work/main/.venv bash bench/http/device_prep.sh
# Run there (the device tool, from the repo root; $OUT comes back):
#   command: bash bench/http/device_load.sh     carry: [".whl", "outputs/device-data"]
#
# Steps: install the carried wheels (--target /tmp/site), write full-size random checkpoints
# (python -m tts_core make-random-checkpoint), then `python -m bench.http.load`: app.py on CUDA with
# --no-ui (no Gradio there) and --no-defer-compile (it answers "ready" once compiled and graphed),
# the in-process engine in the bench's process, both on the CPUs the clients leave free; clients:
# CLIENT_PROCS processes of raw httpx streams pinned to the last CLIENT_CPUS CPUs, plus the official
# openai SDK at 64 listeners for parity. Levels 64 and 256 for mp3/pcm/opus/aac, then per format the
# most listeners that hold "no underrun, nobody behind real time, TTFB p95 <= 300 ms".
# Then two extra runs (256 mp3, 256 pcm listeners) with py-spy recording the server (not in the
# levels' figures; their summary goes into the record). Files in $OUT: http-load-h200.json
# (rewritten after every level), bench.log, app.log (its end), steps.log, nvidia-smi.txt,
# server-256-mp3.pyspy, server-256-pcm.pyspy. BUDGET_S bounds the whole script: no run starts after it.
#
# FORMATS=mp3,pcm narrows the formats (levels and search); PROFILE_IDLE=1 samples waiting threads too;
# TRACE=1 traces the server and the in-process engine (`bench/http/traced.py`: each run's timeline);
# with it, SWITCH_MS=5,0.5 runs every case at each of the server's thread switch intervals. SEARCH=
# and PROFILE= (empty) skip the search and the profiled runs.
# ENCODER_PROCESSES=8,0 starts one app.py per --encoder-processes setting and runs every case on each
# (keys " enc=N" in the record); unset: one app.py with its default.
#
# SMOKE=1 runs the same steps on the tiny checkpoints on CPU at a few listeners (a check of this
# script on a machine without a GPU; no wheels are installed then).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-outputs/device-out}
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-500}
CLIENT_CPUS=${CLIENT_CPUS:-4}
CLIENT_PROCS=${CLIENT_PROCS:-4}
FORMATS=${FORMATS:-mp3,pcm,opus,aac}
if [ "${SMOKE:-0}" = 1 ] || [ ! -d outputs/device-data ]; then  # the smoke run needs the tiny checkpoints
  DATA=${MOSS_TTS_PARITY_DIR:-../shared/moss_tts_nano_data}
else
  DATA=${MOSS_TTS_PARITY_DIR:-outputs/device-data}
fi
PY=${PYTHON:-python3}
step() { echo "[$(($(date +%s) - T0)) s] $*" | tee -a "$OUT/steps.log"; }

if [ "${SMOKE:-0}" != 1 ] && ls .whl/*.whl >/dev/null 2>&1; then
  step "installing $(ls .whl/*.whl | wc -l) carried wheels"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export MOSS_TTS_PARITY_DIR=$DATA HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False PYTHONUNBUFFERED=1
$PY -c "import fastapi, uvicorn, av, soxr, soundfile, openai, httpx, psutil, prometheus_client" \
  || { step "missing packages: run bench/http/device_prep.sh here and carry .whl"; exit 2; }
$PY app.py --help | grep -q -- "--no-ui" \
  || { step "app.py has no --no-ui: this run needs the API-only start (no Gradio on the GPU image)"; exit 2; }
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
step "python: $($PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())')"

if [ "${SMOKE:-0}" = 1 ]; then
  MODEL=(--device cpu --threads 1)
  LEVELS=2,4 SEARCH=2,4 SDK=2 FRAMES=20 REPEATS=1 PROFILE=4:mp3
else
  step "writing full-size random checkpoints"
  $PY -m tts_core make-random-checkpoint /tmp/ckpt > /tmp/checkpoint.log 2>&1 || { cat /tmp/checkpoint.log; exit 1; }
  MODEL=(--checkpoint /tmp/ckpt --device cuda --threads "")
  LEVELS=${LEVELS:-64,256} SEARCH=${SEARCH-128,192,256,320,384} SDK=${SDK:-64} FRAMES=${FRAMES:-100}
  REPEATS=${REPEATS:-3} PROFILE=${PROFILE-256:mp3,256:pcm}
fi
PY_SPY=${PY_SPY:-$(command -v py-spy || echo /tmp/site/bin/py-spy)}
[ -x "$PY_SPY" ] || step "no py-spy: the profiled runs are skipped"
LEFT=$((BUDGET_S - ($(date +%s) - T0)))
step "bench: levels $LEVELS, search $SEARCH, $LEFT s left"
$PY -m bench.http.load "${MODEL[@]}" --data "$DATA" --server-args "--no-ui --no-defer-compile" \
  --streams "$LEVELS" --formats "$FORMATS" --modes stream --frames "$FRAMES" --repeats "$REPEATS" \
  --client httpx --client-processes "$CLIENT_PROCS" --client-cpus "$CLIENT_CPUS" --sdk-levels "$SDK" \
  --search-levels "$SEARCH" --search-formats "$FORMATS" --search-repeats 2 --ttfb-target-ms 300 \
  --profile "$PROFILE" --profile-dir "$OUT" --py-spy "$PY_SPY" ${PROFILE_IDLE:+--profile-idle} \
  ${ENCODER_PROCESSES:+--encoder-processes "$ENCODER_PROCESSES"} ${TRACE:+--trace} \
  ${SWITCH_MS:+--switch-intervals-ms "$SWITCH_MS"} \
  --budget-s "$LEFT" --no-encoder-check --machine-note "nothing else ran on the machine" \
  --json "$OUT/http-load-h200.json" --app-log "$OUT/app.log" 2>&1 | tee "$OUT/bench.log"
status=${PIPESTATUS[0]}
step "bench exited with $status"
exit "$status"
