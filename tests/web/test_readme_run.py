"""The README's own commands, as a new user types them: the offline recipe of "Run it" (the tiny
checkpoint, then `scripts/run.sh` with its flags), then every example of "Use it from code" (curl,
the official `openai` SDK, the command line) against that server.

Read from README.md at test time, so the README cannot drift from what works. Only what differs
between machines is replaced: `.venv/bin/python` by this test's interpreter (whose environment
run.sh reuses through VENV), `/tmp/tiny` by a temporary folder, port 7860 by a free one. Hugging
Face is not reachable here (HF_HUB_OFFLINE=1 in the test session), so the official checkpoints of the
first command cannot be tested: the offline recipe is the path a machine without them takes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import av
import httpx
import pytest
import soundfile as sf
from support.e2e_helpers import free_port
from support.server_helpers import stop_process

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def commands(block: str) -> list[str]:
    """A bash block's commands: comments dropped, backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def machine(tmp_path_factory) -> dict:
    """What differs on this machine: the tiny folder, the port, and the environment's Python."""
    work = tmp_path_factory.mktemp("readme")
    return {"tiny": work / "tiny", "port": free_port(), "work": work,
            "env": {**os.environ, "VENV": sys.prefix, "MOSS_TTS_CACHE_DIR": str(work / "cache"),
                    "PYTHONUNBUFFERED": "1"}}


def localized(command: str, machine: dict) -> str:
    return (command.replace(".venv/bin/python", sys.executable).replace("/tmp/tiny", str(machine["tiny"]))
            .replace("7860", str(machine["port"])))


@pytest.fixture(scope="module")
def readme_server(machine):
    """The offline recipe of "Run it", run as written: the tiny checkpoint, then run.sh with its flags."""
    make, serve = commands(blocks(section("Run it"), "bash")[1])
    assert make == ".venv/bin/python -m tts_core make-tiny-checkpoint /tmp/tiny"
    made = subprocess.run(localized(make, machine), shell=True, cwd=REPO, env=machine["env"], capture_output=True,
                          text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert f"--voices-dir {machine['tiny'] / 'voices'}" in made.stdout
    assert serve.startswith("./scripts/run.sh ")
    log_path = machine["work"] / "run.log"
    env = {**machine["env"], "PORT": str(machine["port"])}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(shlex.split(localized(serve, machine)), cwd=REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{machine['port']}/"
    try:
        deadline = time.monotonic() + 300
        health: dict = {}
        while health.get("status") != "ready":
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")
            assert health.get("status") != "failed", health
            with contextlib.suppress(httpx.HTTPError, ValueError):
                health = httpx.get(url + "health", timeout=5).json()
            time.sleep(0.25)
        yield url
    finally:
        stop_process(process)


def test_the_tiny_checkpoint_refuses_a_tokenizer_path_that_is_not_a_file(machine, tmp_path):
    """The README used to show `--tokenizer path/to/tokenizer.model`; taken literally it must fail
    loudly, never quietly take another tokenizer."""
    result = subprocess.run([sys.executable, "-m", "tts_core", "make-tiny-checkpoint", str(tmp_path / "t"),
                             "--tokenizer", "path/to/tokenizer.model"], cwd=REPO, env=machine["env"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and not (tmp_path / "t" / "lm").exists()
    assert result.stderr.strip() == ("error: --tokenizer path/to/tokenizer.model: no such file; pass the path of the "
                                     "real tokenizer.model, or leave --tokenizer out to use the shared data's")


def test_python_m_tts_core_states_its_usage():
    """Without a command it says what it takes, in one usage line naming each command."""
    result = subprocess.run([sys.executable, "-m", "tts_core"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    usage = result.stderr.splitlines()[0]
    assert usage.startswith("usage: python -m tts_core")
    for command in ("say", "make-tiny-checkpoint", "make-random-checkpoint", "export-onnx", "export-web", "serve-web"):
        assert command in result.stderr


def test_every_preset_with_a_shared_clip_speaks_and_the_others_say_why(readme_server):
    voices = httpx.get(readme_server + "v1/voices", timeout=10).json()["data"]
    unavailable = {v["name"]: v["unavailable_reason"] for v in voices if not v["available"]}
    assert sorted(unavailable) == ["Hana", "Kaze", "Kumo", "Nami", "Sora", "Tsuki"]
    assert set(unavailable.values()) == {"needs the ONNX release's browser_poc_manifest.json, which is not in the "
                                         "voices folder, and downloads are off"}


def test_the_curl_example(readme_server, machine, tmp_path):
    (curl,) = commands(blocks(section("Use it from code"), "bash")[0])
    result = subprocess.run(localized(curl, machine), shell=True, cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    with av.open(str(tmp_path / "hello.mp3")) as container:
        stream = container.streams.audio[0]
        assert container.format.name == "mp3" and stream.rate == 48_000 and stream.channels == 2
        assert sum(frame.samples for frame in container.decode(stream)) > 48_000 // 2


def test_the_openai_example(readme_server, machine, tmp_path):
    (code,) = blocks(section("Use it from code"), "python")
    assert "        ...\n" in code
    script = ("received = []\n" + localized(code, machine).replace("        ...\n", "        received.append(chunk)\n")
              + "data = b''.join(received)\nprint(len(data))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    size = int(result.stdout.strip())
    assert size > 24_000 and size % 2 == 0  # 24 kHz mono s16le: more than half a second


def test_the_command_line_example(machine, tmp_path, readme_server):
    """`.venv/bin/python -m tts_core say "Hello" --voice Quill -o hello.wav`, with the tiny model's flags."""
    say = re.search(r"`(\.venv/bin/python -m tts_core say [^`]+)`", section("Use it from code")).group(1)
    flags = f" --lm {machine['tiny'] / 'lm'} --codec {machine['tiny'] / 'codec'} --voices-dir {machine['tiny'] / 'voices'}"
    out = tmp_path / "hello.wav"  # not into the checkout, from whose root the README runs it
    result = subprocess.run(localized(say, machine).replace("-o hello.wav", f"-o {out}") + flags, shell=True,
                            cwd=REPO, env=machine["env"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    info = sf.info(out)
    assert info.samplerate == 48_000 and info.channels == 2 and info.frames > 0
