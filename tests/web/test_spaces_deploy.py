"""Deploying on Spaces: the README's front matter and hardware table, mode selection flags, the
compile cache, run.sh's torch choice, the full-size random checkpoint and the two GPU-side benches
(run here on the CPU as smoke tests; their figures are never asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.figures import render_figures

from bench.deploy import cold_start
from studio.flags import parse_config
from tts_core.config import DEFAULT_CODEC_ID, DEFAULT_LM_ID
from tts_core.loader import COMPILE_CACHE_ENV, persist_compile_cache

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "figures"


render = render_figures()


def front_matter() -> dict:
    text = (REPO_ROOT / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_front_matter_is_space_ready():
    meta = front_matter()
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert meta["models"] == [DEFAULT_LM_ID, DEFAULT_CODEC_ID]
    assert [entry.split()[0] for entry in meta["preload_from_hub"]] == [DEFAULT_LM_ID, DEFAULT_CODEC_ID]
    assert "suggested_hardware" not in meta  # ZeroGPU is no documented value (tests/unit/test_spaces_build.py)
    assert meta["startup_duration_timeout"].endswith(("m", "h"))


def test_docs_no_longer_promise_the_free_cpu_tier():
    for relative in ("README.md", "docs/DEPLOY.md"):
        text = (REPO_ROOT / relative).read_text()
        assert "free CPU tier" not in text and "free\n  CPU tier" not in text
    deploy = (REPO_ROOT / "docs" / "DEPLOY.md").read_text()
    assert "# Deploying on Hugging Face Spaces" in deploy and "<!-- figures:spaces-hardware:start -->" in deploy
    assert "docs/DEPLOY.md" in (REPO_ROOT / "README.md").read_text()


def test_zerogpu_mode_is_automatic_on_zerogpu_hardware_and_forceable(monkeypatch):
    monkeypatch.delenv("MOSS_TTS_ZEROGPU", raising=False)
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert parse_config([]).page.zerogpu is False
    assert parse_config(["--zerogpu"]).page.zerogpu is True
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert parse_config([]).page.zerogpu is True
    assert parse_config(["--no-zerogpu"]).page.zerogpu is False
    monkeypatch.setenv("MOSS_TTS_ZEROGPU", "0")
    assert parse_config([]).page.zerogpu is False


def test_compile_is_deferred_unless_asked_not_to(monkeypatch):
    monkeypatch.delenv("MOSS_TTS_DEFER_COMPILE", raising=False)
    assert parse_config([]).engine.defer_compile is True
    assert parse_config(["--no-defer-compile"]).engine.defer_compile is False
    monkeypatch.setenv("MOSS_TTS_DEFER_COMPILE", "off")
    assert parse_config([]).engine.defer_compile is False


def test_compile_cache_lives_under_the_cache_dir_unless_set(monkeypatch, tmp_path):
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    assert persist_compile_cache(tmp_path) == tmp_path / "torch-compile"
    assert os.environ[COMPILE_CACHE_ENV] == str(tmp_path / "torch-compile")
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert cache_dir() == str(tmp_path / "torch-compile")  # where inductor (and Triton) will cache
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "mine"))
    assert persist_compile_cache(tmp_path) == tmp_path / "mine"


def _run_sh_plan(env: dict) -> str:
    result = subprocess.run(["bash", "scripts/run.sh"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30,
                            env={**env, "RUN_SH_PLAN": "1"})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.skipif(Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA driver")
def test_run_sh_installs_the_cpu_build_of_torch_without_a_gpu(tmp_path):
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TORCH_WHEEL_DIR": str(tmp_path / "none")}
    assert _run_sh_plan(bare) == "torch: torch --index-url https://download.pytorch.org/whl/cpu"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (fake / "nvidia-smi").chmod(0o755)
    assert _run_sh_plan({**bare, "PATH": f"{fake}:/usr/bin:/bin"}) == "torch: torch"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert _run_sh_plan({**bare, "TORCH_WHEEL_DIR": str(wheels)}) == (
        f"torch: {wheels}/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert _run_sh_plan({**bare, "TORCH_SPEC": "torch==2.5.1"}) == "torch: torch==2.5.1"


def test_run_sh_offline_help_names_the_tiny_checkpoint_route():
    """run.sh's help and the app's load failure give the README's offline recipe word for word."""
    from studio.main import RUN_OFFLINE, _load_hint

    readme = (REPO_ROOT / "README.md").read_text()
    recipe = [".venv/bin/python -m tts_core make-tiny-checkpoint /tmp/tiny",
              "./scripts/run.sh --lm /tmp/tiny/lm --codec /tmp/tiny/codec --voices-dir /tmp/tiny/voices"]
    text = (REPO_ROOT / "scripts" / "run.sh").read_text()
    for command in recipe:
        assert f"\n{command}\n" in readme and command in text and command in RUN_OFFLINE, command
    hint = _load_hint(parse_config(["--lm", "a/b"]).load, OSError("offline"))
    assert hint.endswith(RUN_OFFLINE)


def test_random_checkpoint_is_written_in_the_official_layout(tmp_path, data_dir):
    from bench.lib.models import save_random_checkpoint
    from tts_core.model.codec_loading import load_codec
    from tts_core.model.lm_loading import load_lm

    parity = data_dir / "parity"
    lm_dir, codec_dir = save_random_checkpoint(
        tmp_path, lm_config=parity / "tiny_lm" / "config.json", codec_config=parity / "tiny_codec" / "config.json",
        tokenizer=data_dir / "hf_checkpoint_meta" / "tokenizer.model")
    assert (lm_dir / "tokenizer.model").is_file()
    assert load_lm(lm_dir).config.hidden_size == json.loads((lm_dir / "config.json").read_text())["hidden_size"]
    load_codec(codec_dir)


# ---- the hardware table ----------------------------------------------------------------------------


def _zerogpu_record() -> dict:
    machine = {"cpu_model": "Test CPU", "usable_cpus": 16, "logical_cpus": 16, "torch_threads": 8,
               "gpus": ["Test GPU"], "cuda": "12.8", "torch": "2.13.0"}
    return {"kind": "zerogpu", "date": "2026-01-02T03:04:05Z", "machine": machine,
            "cold": {"ttfp_ms": 2345.6, "rtf": 0.5},
            "warm": {"ttfp_ms": {"median": 61.2, "min": 60, "max": 70}, "rtf": {"median": 0.21, "min": 0.2, "max": 0.3}}}


def _cold_start_record() -> dict:
    record = _zerogpu_record()
    record.update(kind="cold_start", setup={"weights": "full-size, random weights"}, runs=[
        {"scenario": "empty", "first_audio_s": 12.34, "server_up_s": 2.1, "ready_s": 11.9, "graphs_s": 30.2,
         "device": "cuda:0"},
        {"scenario": "warm", "first_audio_s": 6.78, "server_up_s": 2.0, "ready_s": 6.5, "graphs_s": 12.0,
         "device": "cuda:0"}])
    return record


def test_hardware_table_shows_measured_figures_with_their_machine():
    records = [*render.load_records(FIXTURES), ("zerogpu-test.json", _zerogpu_record()),
               ("cold-start-test.json", _cold_start_record())]
    block = render.render_blocks(records)["spaces-hardware"]
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    assert len(rows) == 7  # header + ZeroGPU, CPU basic, CPU upgrade, T4, L4/A10G, A100/H100/H200
    zero = rows[1]
    assert "first call of a worker TTFP 2346 ms" in zero and "later calls TTFP 61.2 ms" in zero
    assert "Test GPU, 16 CPUs, 2026-01-02 03:04 UTC, `zerogpu-test.json`" in zero
    assert "TTFP 342 ms, RTF 1.781" in rows[2] and "`cpu-fp32.json`" in rows[2]
    assert "not measured" in rows[3] and "not measured" in rows[4] and "not measured" in rows[5]
    assert "graphed: TTFP 12.1 ms, RTF 0.041" in rows[6] and "`gpu-graphed.json`" in rows[6]
    assert ("empty cache 12.3 s (server answering after 2.1 s, model ready after 11.9 s, CUDA graphs in use "
            "after 30.2 s); warm cache 6.8 s") in block
    assert render.render_blocks(records)["spaces-hardware"] == block  # deterministic


def test_hardware_table_says_pending_without_records(tmp_path):
    block = render.render_spaces([])
    assert "pending: `python -m bench.deploy.zerogpu" in block and "Process start → first audio: pending" in block
    cpu_only = [(n, r) for n, r in render.load_records(FIXTURES) if n == "cpu-fp32.json"]
    zerogpu_on_cpu = {**_zerogpu_record(), "machine": {**_zerogpu_record()["machine"], "gpus": []}}
    assert "pending" in render.render_spaces([*cpu_only, ("z.json", zerogpu_on_cpu)]).splitlines()[2]
    assert "not measured (no one-stream CPU record)" in render.render_spaces([]).splitlines()[3]


def _level_row(streams: int, ttfp_ms: float, rtf: float) -> dict:
    figure = lambda value: {"median": value, "min": value, "max": value}  # noqa: E731
    return {"streams": streams, "ttfp_p50_ms": figure(ttfp_ms), "ttfp_p95_ms": figure(ttfp_ms), "rtf_p50": figure(rtf),
            "rtf_max": figure(rtf), "x_realtime": figure(streams / rtf), "memory": {"peak_mib": None}, "repeats": 3}


def test_one_stream_figure_is_the_newest_record_that_measured_one_stream():
    """The bug this guards against: records were taken in file-name order and a record without a
    one-stream row gave its first row (a 256-stream figure) under the "one stream" heading."""
    [(_, base)] = [(n, r) for n, r in render.load_records(FIXTURES) if n == "gpu-graphed.json"]
    older = {**base, "date": "2026-01-01T00:00:00Z", "modes": {"graphed": [_level_row(1, 6.9, 0.020),
                                                                         _level_row(64, 37.7, 0.050)]}}
    sweep = {**base, "date": "2026-01-03T00:00:00Z", "modes": {"graphed": [_level_row(256, 358.0, 0.392)]}}
    newest = {**base, "date": "2026-01-02T00:00:00Z", "modes": {"graphed": [_level_row(1, 7.5, 0.021)]}}
    # File names sort the 256-only record first, as `gpu-1xh200-256.json` did before `gpu-h200.json`.
    row = render.render_spaces([("a-256.json", sweep), ("b-old.json", older)]).splitlines()[7]
    assert "graphed: TTFP 6.9 ms, RTF 0.020" in row and "`b-old.json`" in row and "358" not in row
    row = render.render_spaces([("a-256.json", sweep), ("b-old.json", older), ("c-new.json", newest)]).splitlines()[7]
    assert "graphed: TTFP 7.5 ms, RTF 0.021" in row and "`c-new.json`" in row
    row = render.render_spaces([("a-256.json", sweep)]).splitlines()[7]
    assert "not measured (no one-stream GPU record)" in row and "358" not in row


# ---- the benches, as smoke runs on the CPU -------------------------------------------------------


def test_cold_start_command_keeps_no_local_path():
    argv = ["--lm", "/x/lm", "--codec=/x/codec", "--device", "cuda", "--json", "/tmp/r.json", "--app-arg=--quantize=fp32",
            "--app-arg=--tokenizer=/x/t.model"]
    assert cold_start.command_of(argv) == ("python -m bench.deploy.cold_start --device cuda --app-arg=--quantize=fp32 "
                                           "--app-arg=--tokenizer=<path>")


def test_zerogpu_bench_runs_on_the_cpu(tmp_path, data_dir):
    parity = data_dir / "parity"
    out = tmp_path / "zerogpu.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench.deploy.zerogpu", "--lm-config", str(parity / "tiny_lm" / "config.json"),
         "--codec-config", str(parity / "tiny_codec" / "config.json"), "--frames", "6", "--repeats", "1",
         "--json", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["kind"] == "zerogpu" and [r["worker"] for r in record["runs"]] == ["cold", "warm"]
    assert record["checks"]["parent_cuda_initialized"] is False and record["checks"]["workers"] == 1
    assert all(r["audio_s"] == pytest.approx(6 * 0.08) for r in record["runs"])


@pytest.mark.e2e
def test_cold_start_bench_runs_on_the_cpu(tmp_path, data_dir):
    parity = data_dir / "parity"
    out = tmp_path / "cold.json"
    env = {**os.environ, "MOSS_TTS_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "bench.deploy.cold_start", "--lm", str(parity / "tiny_lm"), "--codec", str(parity / "tiny_codec"),
         f"--app-arg=--tokenizer={data_dir / 'hf_checkpoint_meta' / 'tokenizer.model'}", "--app-arg=--quantize=fp32",
         "--device", "cpu", "--json", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["kind"] == "cold_start" and [r["scenario"] for r in record["runs"]] == ["empty", "warm"]
    for run in record["runs"]:
        assert 0 < run["server_up_s"] <= run["first_audio_s"] and run["device"] == "cpu"
    assert str(data_dir) not in json.dumps(record)  # no local path in a record that may be committed


@pytest.mark.slow  # a fresh interpreter loads the model and generates
def test_cold_start_bench_times_the_engine_alone_where_the_web_stack_is_missing(tmp_path, data_dir):
    parity = data_dir / "parity"
    out = tmp_path / "cold-engine.json"
    env = {**os.environ, "MOSS_TTS_NUM_THREADS": "1",
           "MOSS_TTS_TOKENIZER": str(data_dir / "hf_checkpoint_meta" / "tokenizer.model")}
    result = subprocess.run(
        [sys.executable, "-m", "bench.deploy.cold_start", "--engine-only", "--scenarios", "empty", "--lm", str(parity / "tiny_lm"),
         "--codec", str(parity / "tiny_codec"), "--device", "cpu", "--timeout", "60", "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    (run,) = record["runs"]
    assert record["setup"]["what"] == "the engine alone (no web server)"
    assert 0 < run["ready_s"] <= run["first_audio_s"] and run["first_request_ttfp_ms"] > 0
    assert run["step_at_end"] == "eager" and run["graphs_s"] is None  # the CPU path never compiles
    block = render.render_blocks([("cold-start-cpu.json", record)])["cold-start"]  # docs/DEPLOY.md
    assert block.startswith("**Cold start of `the engine alone (no web server)`.**")
    assert "| empty | – |" in block  # no server-up time without the server
