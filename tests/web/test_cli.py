"""The command line as a user runs it: make a tiny checkpoint pair, then speak with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], data_dir: Path, cache: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MOSS_TTS_PARITY_DIR": str(data_dir), "MOSS_TTS_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "tts_core", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow  # two fresh interpreters: the checkpoint, then the CLI's synthesis
def test_make_tiny_checkpoint_then_say(tmp_path, data_dir):
    made = _run(["make-tiny-checkpoint", str(tmp_path / "tiny")], data_dir, tmp_path / "cache")
    assert made.returncode == 0, made.stderr
    lm_dir, codec_dir = tmp_path / "tiny" / "lm", tmp_path / "tiny" / "codec"
    for path in (lm_dir / "config.json", lm_dir / "model.safetensors", lm_dir / "tokenizer.model",
                 codec_dir / "config.json", codec_dir / "model.safetensors"):
        assert path.is_file(), path

    out = tmp_path / "hello.wav"
    env_cache = ["--voices-dir", str(data_dir / "presets")]
    said = _run(["say", "Hello from the command line, a sentence of moderate length.", "--lm", str(lm_dir),
                 "--codec", str(codec_dir), "-o", str(out), "--seed", "3", *env_cache], data_dir, tmp_path / "cache")
    assert said.returncode == 0, said.stderr
    audio, rate = sf.read(out, always_2d=True)
    assert rate == 48000 and audio.shape[1] == 2
    # The tiny LM never stops by itself: it talks for the text-proportional frame cap (> 2 s here),
    # at a comfortable level rather than full-scale noise.
    assert audio.shape[0] > 2 * 48000 and audio.shape[0] % 3840 == 0
    assert 0.001 < float((audio**2).mean() ** 0.5) < 0.5

    cloned = tmp_path / "clone.flac"
    said = _run(["say", "Cloned.", "--lm", str(lm_dir), "--codec", str(codec_dir), "--ref-audio",
                 str(data_dir / "presets" / "en_3.wav"), "--max-frames", "5", "-o", str(cloned)], data_dir, tmp_path / "cache")
    assert said.returncode == 0, said.stderr
    info = sf.info(cloned)
    assert info.samplerate == 48000 and info.channels == 2 and info.frames == 5 * 3840


def test_cli_errors_are_one_clear_line(tmp_path, data_dir):
    result = _run(["say", "hi", "--lm", str(tmp_path / "missing"), "--codec", str(tmp_path / "missing"),
                   "-o", str(tmp_path / "x.wav")], data_dir, tmp_path / "cache")
    assert result.returncode == 2
    assert "error:" in result.stderr and "Traceback" not in result.stderr


def test_app_takes_the_server_flags():
    """`python app.py --help` lists every server flag with its environment twin; a malformed variable is
    one clear line, not a traceback; the library's own help points at app.py."""
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    app = subprocess.run([sys.executable, "app.py", "--help"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=60)
    assert app.returncode == 0, app.stderr
    for flag in ("--lm", "--codec", "--tokenizer", "--voices-dir", "--device", "--dtype", "--host", "--port",
                 "--max-active-streams", "--max-queue", "--max-text-chars", "--allow-remote-audio", "--max-upload-mb",
                 "--max-ref-audio-s", "--cors-allow-origins", "--devices", "--quantize", "--enforce-eager",
                 "--log-level", "[MOSS_TTS_LM]", "[PORT]"):
        assert flag in app.stdout, flag
    top = subprocess.run([sys.executable, "-m", "tts_core", "--help"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60)
    assert top.returncode == 0 and "python app.py" in top.stdout, top.stdout
    bad = subprocess.run([sys.executable, "app.py", "--help"], cwd=REPO, capture_output=True,
                         text=True, timeout=60, env={**env, "MOSS_TTS_ALLOW_REMOTE_AUDIO": "ture"})
    assert bad.returncode == 2 and "MOSS_TTS_ALLOW_REMOTE_AUDIO" in bad.stderr and "Traceback" not in bad.stderr
