"""Cold start: process start -> first audio of `python app.py`, as users start it, with an empty and a
warm cache dir. Writes a JSON record (kind "cold_start") that scripts/render_figures.py shows.

    python -m bench.deploy.cold_start --json bench/results/cold-start-h200.json            # on the GPU
    python -m bench.deploy.cold_start --lm L --codec C --device cpu --json /tmp/cold.json  # any checkpoint

Without --lm/--codec it writes full-size models with random weights once (`python -m tts_core
make-random-checkpoint`, real configs from the shared data) into --checkpoint-dir and serves those.
Each scenario starts `python app.py` with its own MOSS_TTS_CACHE_DIR (encoded voices and the
torch.compile cache live there): "empty" a new folder, "warm" the folder the previous run filled.
From the moment the process is spawned it records: the first answer of GET /health (server up),
"ready" (model loaded and warmed up), the first audio byte of POST /api/tts/stream, asked for
again and again from the moment the server answers, as an impatient first listener would (503
while loading), and when the Gradio page is served (built after the model; not with --no-ui). On CUDA it then waits for the engine to switch to the compiled step with CUDA
graphs (its log line) and times one more request there. Timings are measurements, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.lib.app import free_port
from bench.lib.args import REPO_ROOT, shared_data_dir
from bench.lib.machine import machine_info_without_cuda
from bench.lib.record import new_record, write_record

GRAPHS_LINE = "engine now runs the compiled+graphs step"
# --engine-only: the same start without the web server (no gradio / fastapi needed), in a child
# that prints these markers; the parent stamps them on arrival.
ENGINE_SCRIPT = """
import os, sys, time
print("cold-start: python up", flush=True)
import torch
print("cold-start: torch imported", flush=True)
from tts_core import Synthesizer, SynthesisRequest
lm, codec, device = sys.argv[1:4]
synth = Synthesizer.from_pretrained(lm, codec, device=device, voices_dir=None, allow_download=False,
                                    tokenizer=os.environ.get("MOSS_TTS_TOKENIZER") or None,
                                    report=lambda line: print(f"cold-start: phase {line}", flush=True))
print("cold-start: ready", flush=True)
request = dict(text=sys.argv[4], mode="continuation", seed=1, max_frames=25)

def ttfp_ms():
    started = time.monotonic()
    first = None
    for chunk in synth.stream(SynthesisRequest(**request)):
        if first is None and chunk.pcm.shape[1]:
            first = 1000 * (time.monotonic() - started)
            print("cold-start: first audio", flush=True)
    return first

print(f"cold-start: ttfp_ms {ttfp_ms():.1f}", flush=True)
runner = synth.engine.runner
deadline = time.monotonic() + float(sys.argv[5])
while runner.device.type == "cuda" and runner.step_kind != "compiled+graphs" and time.monotonic() < deadline:
    time.sleep(0.05)
print(f"cold-start: step {runner.step_kind}", flush=True)
if runner.step_kind == "compiled+graphs":
    print(f"cold-start: graphs ttfp_ms {ttfp_ms():.1f}", flush=True)
synth.close()
"""
REQUEST = {"text": "Hello! This is the first sentence a listener hears.", "seed": 1, "max_frames": 25}




class LogWatch:
    """The app's output, each line stamped with the seconds since `t0` when it arrived."""

    def __init__(self, stream, t0: float, echo: bool):
        self.t0, self.echo = t0, echo
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append((time.monotonic() - self.t0, line))
            if self.echo:
                print(f"  [app {self.lines[-1][0]:6.2f}s] {line}", file=sys.stderr)

    def join(self) -> None:
        self._thread.join(10)

    def first(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)


def first_audio(url: str, t0: float, deadline: float) -> tuple[float, int]:
    """Seconds from `t0` to the first audio byte of a stream request, retried while the model loads;
    and how many requests were refused (503) before."""
    refused = 0
    while time.monotonic() < deadline:
        try:
            with httpx.stream("POST", url + "/api/tts/stream", json=REQUEST, timeout=120) as response:
                if response.status_code == 503:
                    refused += 1
                    time.sleep(0.05)
                    continue
                response.raise_for_status()
                for chunk in response.iter_bytes():
                    if chunk:
                        return time.monotonic() - t0, refused
        except httpx.TransportError:
            time.sleep(0.05)
    raise TimeoutError("no audio before the deadline")


def request_ttfp_ms(url: str) -> float:
    started = time.monotonic()
    with httpx.stream("POST", url + "/api/tts/stream", json=REQUEST, timeout=120) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            if chunk:
                return 1000 * (time.monotonic() - started)
    raise RuntimeError("the stream ended without audio")


def _marker_value(log: LogWatch, marker: str) -> float | None:
    line = next((line for _, line in log.lines if marker in line), None)
    return None if line is None else float(line.rsplit(" ", 1)[-1])


def run_engine_scenario(name: str, lm: str, codec: str, cache_dir: Path, args: argparse.Namespace) -> dict:
    """Process start -> first audio of the engine alone (Synthesizer in a fresh `python`)."""
    env = {**os.environ, "MOSS_TTS_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    t0 = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", ENGINE_SCRIPT, lm, codec, args.device, REQUEST["text"],
                                str(args.timeout)], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = LogWatch(process.stdout, t0, args.verbose)
    try:
        process.wait(timeout=args.timeout + 60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.join()
    if log.first("cold-start: first audio") is None:
        tail = "\n".join(line for _, line in log.lines[-30:])
        raise RuntimeError(f"the engine gave no audio (exit {process.returncode}):\n{tail}")
    step = next((line.rsplit(" ", 1)[-1] for _, line in log.lines if "cold-start: step" in line), None)
    return {"scenario": name, "first_audio_s": _round(log.first("cold-start: first audio")),
            "ready_s": _round(log.first("cold-start: ready")), "first_request_ttfp_ms": _marker_value(log, "cold-start: ttfp_ms"),
            "device": args.device, "step_at_end": step, "graphs_s": _round(log.first("cold-start: step compiled+graphs")),
            "graphs_request_ttfp_ms": _marker_value(log, "cold-start: graphs ttfp_ms"),
            # Where start-up time goes: seconds from process start to each step the loader reports.
            "phases": [[_round(t), line.split("cold-start: ", 1)[1].removeprefix("phase ")] for t, line in log.lines
                       if "cold-start: phase" in line or "cold-start: python up" in line
                       or "cold-start: torch imported" in line]}


def run_scenario(name: str, app_args: list[str], cache_dir: Path, args: argparse.Namespace) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PORT": str(port), "MOSS_TTS_CACHE_DIR": str(cache_dir), "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the app keeps it under the cache dir
    load_average = round(os.getloadavg()[0], 2)  # this run's share of a shared machine
    t0 = time.monotonic()
    process = subprocess.Popen([sys.executable, "app.py", *app_args], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    log = LogWatch(process.stdout, t0, args.verbose)
    deadline = t0 + args.timeout
    try:
        up_s = None
        while up_s is None and time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"app.py exited with {process.returncode}")
            try:
                httpx.get(url + "/health", timeout=2)
                up_s = time.monotonic() - t0
            except httpx.TransportError:
                time.sleep(0.05)
        audio_s, refused = first_audio(url, t0, deadline)
        health = httpx.get(url + "/health", timeout=10).json()
        result = {"scenario": name, "server_up_s": round(up_s, 3), "first_audio_s": round(audio_s, 3),
                  "refused_while_loading": refused, "ready_s": _round(log.first("model: ready")),
                  "warm_request_ttfp_ms": round(request_ttfp_ms(url), 1), "device": health.get("device"),
                  "dtype": health.get("dtype"), "precision": health.get("precision"),
                  "load_average_1m": load_average, "phases": app_phases(log)}
        while log.first(PAGE_LINE) is None and "--no-ui" not in app_args and time.monotonic() < deadline \
                and process.poll() is None:
            time.sleep(0.1)
        result["page_s"] = _round(log.first(PAGE_LINE))
        if str(health.get("device", "")).startswith("cuda"):
            while log.first(GRAPHS_LINE) is None and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.1)
            result["graphs_s"] = _round(log.first(GRAPHS_LINE))
            if result["graphs_s"] is not None:
                result["graphs_request_ttfp_ms"] = round(request_ttfp_ms(url), 1)
        return result
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.returncode not in (0, -15) and args.verbose:
            print("\n".join(line for _, line in log.lines[-40:]), file=sys.stderr)


# Log lines of app.py that mark where its start-up time goes (seconds from process start to each).
APP_MARKERS = (("model: importing the engine", "engine import begins (model-loader thread)"),
               ("model: locating LM checkpoint", "torch and the engine imported"),
               ("model: loading LM", "LM weights: reading"),
               ("model: loading codec", "codec weights: reading"),
               ("model: measuring CPU speed in fp32", "CPU mode: measuring fp32"),
               ("model: measuring CPU speed with fp16 weights", "CPU mode: measuring fp16"),
               ("model: measuring CPU speed with int8 weights", "CPU mode: measuring int8"),
               ("as measured at an earlier start", "CPU mode: kept from an earlier start"),
               ("model: warming up", "warm-up"),
               ("model: ready", "model ready"),
               ("serving on http", "server routes built, about to serve"),
               ("Application startup complete", "server answering"),
               ("encoding reference clip", "a voice clip encoded (first request or voice warm-up)"),
               ("building the page", "page: building (Gradio imported now)"),
               ("the page is served at /", "page served"))
PAGE_LINE = "the page is served at /"


def app_phases(log: LogWatch) -> list[list]:
    """[seconds, what] for each marker the app's log showed, in order of time."""
    found = [[_round(log.first(marker)), what] for marker, what in APP_MARKERS if log.first(marker) is not None]
    return sorted(found, key=lambda item: item[0])


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", help="LM checkpoint dir (default: full-size random weights in --checkpoint-dir)")
    parser.add_argument("--codec", help="codec checkpoint dir (with --lm)")
    parser.add_argument("--checkpoint-dir", type=Path, default=REPO_ROOT / "outputs" / "random-full-size",
                        help="where the full-size random checkpoint is written once and reused")
    parser.add_argument("--voices-dir", type=Path, default=shared_data_dir() / "presets")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--scenarios", default="empty,warm", help="comma-separated: empty, warm (in order)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per scenario")
    parser.add_argument("--app-arg", action="append", default=[], help="extra flag for app.py (repeatable)")
    parser.add_argument("--engine-only", action="store_true",
                        help="time the engine alone (Synthesizer in a fresh python), for machines without the "
                             "web server's packages; no server-up time then")
    parser.add_argument("--json", help="write the record here")
    parser.add_argument("--note", action="append", help="a note kept in the record")
    parser.add_argument("-v", "--verbose", action="store_true", help="echo the app's log")
    args = parser.parse_args(argv)

    if bool(args.lm) != bool(args.codec):
        parser.error("--lm and --codec go together")
    lm, codec = args.lm, args.codec
    weights = "given checkpoints"
    if lm is None:
        folder = args.checkpoint_dir
        if not (folder / "lm" / "model.safetensors").is_file() or not (folder / "codec" / "model.safetensors").is_file():
            print(f"writing full-size random checkpoints to {folder} ...", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "tts_core", "make-random-checkpoint", str(folder)], cwd=REPO_ROOT,
                           check=True)
        lm, codec, weights = str(folder / "lm"), str(folder / "codec"), "full-size, random weights"
    app_args = ["--lm", lm, "--codec", codec, "--device", args.device, *args.app_arg]
    if args.voices_dir and args.voices_dir.is_dir():
        app_args += ["--voices-dir", str(args.voices_dir)]

    results = []
    with tempfile.TemporaryDirectory(prefix="moss-cold-start-") as tmp:
        cache = Path(tmp) / "cache"
        for name in [s.strip() for s in args.scenarios.split(",") if s.strip()]:
            if name not in ("empty", "warm"):
                parser.error(f"unknown scenario {name!r}: use empty and/or warm")
            if name == "empty" and cache.exists():
                cache = Path(tempfile.mkdtemp(dir=tmp, prefix="cache-"))
            print(f"scenario {name}: cache {cache}", file=sys.stderr)
            if args.engine_only:
                results.append(run_engine_scenario(name, lm, codec, cache, args))
            else:
                results.append(run_scenario(name, app_args, cache, args))
            print(json.dumps(results[-1]), file=sys.stderr)

    machine = machine_info_without_cuda()  # after the runs; never initialises CUDA
    args.lm = args.codec = None  # local paths stay out of the record
    args.app_arg = [public_arg(a) for a in args.app_arg]
    what = "the engine alone (no web server)" if args.engine_only else "python app.py"
    record = new_record("cold_start", args, machine, {"weights": weights, "request": REQUEST, "what": what,
                                                      "device": args.device, "app_args": args.app_arg})
    record["args"].pop("checkpoint_dir", None)
    record["args"].pop("voices_dir", None)
    record["command"] = command_of(argv if argv is not None else sys.argv[1:])
    record["runs"] = results
    print(json.dumps(results, indent=2))
    if args.json:
        write_record(record, args.json)
    return 0


def command_of(argv: list[str]) -> str:
    """The command as run, without local paths (checkpoints, folders, the record's own path)."""
    private = ("--lm", "--codec", "--checkpoint-dir", "--voices-dir", "--json", "--note")
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg.split("=", 1)[0] in private:
            skip = "=" not in arg
            continue
        kept.append(public_arg(arg))
    return " ".join([f"python -m {__spec__.name}", *kept])


def public_arg(arg: str) -> str:
    """An argument for the record: a local path in it is replaced by "<path>"."""
    if "/" not in arg:
        return arg
    name, equals, _ = arg.rpartition("=")
    return f"{name}=<path>" if equals else "<path>"


if __name__ == "__main__":
    raise SystemExit(main())
