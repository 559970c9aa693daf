"""Fixtures and helpers of the OpenAI-API tests (a pytest plugin: `pytest_plugins = ["support.openai_helpers"]`).

The fixtures are named `oa_*`: a plugin's fixtures are visible to every test module, so their names
must not clash with other modules' (`api`, `clip_wav`, ...).

Each test module that loads it gets its own real server (`create_app` on uvicorn, tiny checkpoints),
driven with the official `openai` SDK and raw httpx. The engine has one slot and a one-request
queue, so the busy (503) and cancellation cases are easy to provoke.
"""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from studio.app import create_app
from studio.service import SynthesizerService
from studio.settings import ServerSettings
from support.server_helpers import ServerThread, tiny_synthesizer_factory
from tts_core.config import EngineConfig

SR = 48_000
TEXT = "Hello there."
SMALL = {"seed": 7, "max_frames": 5}  # 5 frames = 0.4 s of audio: quick on the tiny model
MAX_TEXT_CHARS = 1500
MAX_UPLOAD_BYTES = 256 * 1024
FORMATS = ("wav", "flac", "mp3", "opus", "aac", "pcm")


# ---- servers ----------------------------------------------------------------------------------


def settings_for(**overrides) -> ServerSettings:
    return ServerSettings(max_text_chars=MAX_TEXT_CHARS, max_upload_bytes=MAX_UPLOAD_BYTES, **overrides)


@pytest.fixture(scope="module")
def oa_service(data_dir: Path, tmp_path_factory) -> SynthesizerService:
    factory = tiny_synthesizer_factory(
        data_dir, tmp_path_factory.mktemp("voice_cache"),
        EngineConfig(max_active_streams=1, max_queue=1, max_text_chars=MAX_TEXT_CHARS))

    svc = SynthesizerService(factory)
    svc.start(background=False)
    assert svc.wait(0), f"tiny model failed to load: {svc.error}"
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def oa_url(oa_service: SynthesizerService, data_dir: Path) -> str:
    settings = settings_for(lm_id=str(data_dir / "parity" / "tiny_lm"), codec_id=str(data_dir / "parity" / "tiny_codec"))
    with ServerThread(create_app(oa_service, settings)) as server:
        yield server.url


@pytest.fixture(scope="module")
def oa_api(oa_url: str) -> httpx.Client:
    with httpx.Client(base_url=oa_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def oa_sdk(oa_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{oa_url}/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def oa_voice(oa_api: httpx.Client) -> str:
    return oa_api.get("/v1/voices").json()["default"]


@pytest.fixture(scope="module")
def oa_clip(data_dir: Path) -> bytes:
    """A 1.5 s reference clip cut from a preset, as a small mono 24 kHz WAV (server resamples)."""
    audio, sr = sf.read(data_dir / "presets" / "en_2.wav", dtype="float32", always_2d=True)
    start = int(0.5 * sr)
    clip = audio[start : start + int(1.5 * sr)].mean(axis=1)[::2]
    out = io.BytesIO()
    sf.write(out, clip, sr // 2, format="WAV", subtype="PCM_16")
    return out.getvalue()


def speech(api: httpx.Client, voice: str, **fields) -> httpx.Response:
    return api.post("/v1/audio/speech", json={"model": "moss-tts-nano", "input": TEXT, "voice": voice, **fields})


def pcm16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").reshape(-1, 2)  # [n, 2]


def assert_same_audio(a: bytes | np.ndarray, b: bytes | np.ndarray) -> None:
    """Same length and the same samples, bit for bit: on the CPU a request's audio is a function of
    the request alone (tests/engine/test_cpu_determinism.py)."""
    a = pcm16(a) if isinstance(a, bytes) else a
    b = pcm16(b) if isinstance(b, bytes) else b
    assert a.shape == b.shape and a.shape[0] > 0, (a.shape, b.shape)
    assert np.array_equal(a, b), f"{int((a != b).sum())} samples differ"


def wav_data(data: bytes) -> bytes:
    """The payload of a WAV file's data chunk (its size field may be a streaming placeholder)."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    pos = 12
    while data[pos : pos + 4] != b"data":
        pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
    return data[pos + 8 :]
