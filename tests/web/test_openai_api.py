"""The OpenAI-compatible speech API against a real server running the tiny checkpoints: the listing
routes, every format, determinism, voice names, streamed pcm/wav, voice cloning (inline and remote).

Errors and the busy server are in `test_openai_errors.py`; SSE, progressive formats, speed, captions
and OpenAI's pcm in `test_openai_stream.py`. Fixtures: `openai_helpers.py`.
"""

from __future__ import annotations

import base64
import io
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from fastapi import FastAPI
from support.openai_helpers import (
    FORMATS,
    MAX_UPLOAD_BYTES,
    SMALL,
    SR,
    TEXT,
    assert_same_audio,
    pcm16,
    settings_for,
    speech,
    wav_data,
)
from support.server_helpers import ServerThread
from support.stream_decoding import decode_progressively

from studio.api.openai_api import build_openai_router
from studio.errors import install_error_handlers
from studio.service import SynthesizerService

pytestmark = pytest.mark.slow  # one real server for the module


# ---- listing routes ---------------------------------------------------------------------------


def test_models_list(oa_api: httpx.Client, data_dir: Path) -> None:
    resp = oa_api.get("/v1/models")
    assert resp.status_code == 200
    body = resp.json()
    ids = [m["id"] for m in body["data"]]
    assert body["object"] == "list" and ids[0] == "moss-tts-nano" and "tts-1" in ids
    assert all(m["object"] == "model" for m in body["data"])
    assert str(data_dir) not in resp.text and "tiny_lm" not in resp.text  # a local checkpoint path never leaks
    assert oa_api.get("/v1/models/tts-1").json()["id"] == "tts-1"
    assert oa_api.get("/v1/models/whisper-1").status_code == 404


def test_voices_list(oa_api: httpx.Client, oa_voice: str) -> None:
    body = oa_api.get("/v1/voices").json()
    names = [v["name"] for v in body["data"]]
    assert oa_voice in names
    for voice in body["data"]:
        assert set(voice) == {"name", "language", "gender", "description", "available", "unavailable_reason"}
    assert any(v["available"] for v in body["data"])


def test_openapi_documents_the_routes(oa_api: httpx.Client) -> None:
    spec = oa_api.get("/openapi.json").json()
    post = spec["paths"]["/v1/audio/speech"]["post"]
    content = post["responses"]["200"]["content"]
    assert {"audio/mpeg", "audio/ogg", "audio/aac", "audio/flac", "audio/wav", "audio/pcm", "text/event-stream"} <= set(content)
    assert "application/json" not in content
    ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    props = spec["components"]["schemas"][ref]["properties"]
    for name in ("model", "input", "voice", "response_format", "speed", "instructions", "stream", "stream_format",
                 "sample_rate", "timestamps", "ref_audio", "ref_text", "seed", "temperature", "top_p", "top_k",
                 "repetition_penalty", "max_frames"):
        assert props[name].get("description"), name
    assert {"400", "404", "413", "503"} <= set(post["responses"])
    assert "/v1/voices" in spec["paths"] and "/v1/models" in spec["paths"]
    assert {"post", "get"} <= set(spec["paths"]["/v1/audio/voices"]) and "delete" in spec["paths"]["/v1/audio/voices/{voice_id}"]
    assert oa_api.get("/docs").status_code == 200


# ---- audio ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_pcm(oa_api: httpx.Client, oa_voice: str) -> np.ndarray:
    resp = speech(oa_api, oa_voice, response_format="pcm", **SMALL)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "audio/pcm"
    assert resp.headers["x-sample-rate"] == "48000" and resp.headers["x-channels"] == "2"
    pcm = pcm16(resp.content)
    assert pcm.shape[0] > 0 and np.abs(pcm).max() > 0
    return pcm


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_decodes_to_48k_stereo_of_the_length_asked(
    oa_sdk: openai.OpenAI, oa_voice: str, reference_pcm: np.ndarray, fmt: str
) -> None:
    result = oa_sdk.audio.speech.create(model="moss-tts-nano", voice=oa_voice, input=TEXT, response_format=fmt,
                                     extra_body=SMALL)
    headers = result.response.headers
    assert headers["x-sample-rate"] == "48000" and headers["x-channels"] == "2" and headers["x-audio-format"] == fmt
    if fmt == "pcm":
        assert_same_audio(result.content, reference_pcm)
        return
    if fmt == "aac":  # ADTS: PyAV decodes it (libsndfile cannot); the encoder adds its priming samples
        decoded = decode_progressively("aac", [result.content])
        assert decoded.rate == SR and decoded.channels == 2
        assert 0 <= decoded.samples - reference_pcm.shape[0] <= 3 * 1024
        return
    audio, sr = sf.read(io.BytesIO(result.content), dtype="int16", always_2d=True)
    assert sr == SR and audio.shape[1] == 2
    if fmt == "mp3":  # streamed: no LAME tag can carry the encoder's delay and padding (as OpenAI's stream)
        assert 0 <= audio.shape[0] - reference_pcm.shape[0] <= 3 * 1152, f"{audio.shape[0]} vs {reference_pcm.shape[0]}"
        return
    assert audio.shape[0] == reference_pcm.shape[0], f"{fmt}: {audio.shape[0]} vs {reference_pcm.shape[0]}"
    if fmt in ("wav", "flac"):  # lossless: the very same samples
        assert_same_audio(audio, reference_pcm)


def test_same_seed_same_audio_and_greedy_is_deterministic(oa_api: httpx.Client, oa_voice: str) -> None:
    first = speech(oa_api, oa_voice, response_format="pcm", **SMALL).content
    assert_same_audio(speech(oa_api, oa_voice, response_format="pcm", **SMALL).content, first)
    other_seed = pcm16(speech(oa_api, oa_voice, response_format="pcm", seed=8, max_frames=5).content)
    assert other_seed.shape != pcm16(first).shape or np.abs(other_seed.astype(np.int32) - pcm16(first)).max() > 100
    greedy = [speech(oa_api, oa_voice, response_format="pcm", greedy=True, max_frames=5).content for _ in "ab"]
    assert_same_audio(*greedy)


def test_openai_voice_names_pick_a_preset_of_the_inputs_language(oa_sdk: openai.OpenAI, oa_api: httpx.Client,
                                                                  oa_voice: str) -> None:
    """alloy, echo, ... (no preset's names) speak English text with an English preset, Chinese text
    with the default (Chinese) one, Japanese with a Japanese one; through the official SDK."""
    voices = {v["name"]: v for v in oa_api.get("/v1/voices").json()["data"] if v["available"]}
    for text, language in (("Hello there.", "en"), ("你好。", "zh"), ("こんにちは。", "ja")):
        for name in ("alloy", "echo"):
            raw = oa_sdk.audio.speech.with_raw_response.create(
                model="tts-1", voice=name, input=text, response_format="pcm", extra_body={"max_frames": 1})
            assert raw.status_code == 200
            spoke = urllib.parse.unquote(raw.headers["x-voice"])
            assert voices[spoke]["language"] == language, (name, text, spoke)
    mapped = speech(oa_api, "alloy", response_format="pcm", **SMALL)  # English: the first English preset
    english = next(name for name, v in voices.items() if v["language"] == "en")
    assert urllib.parse.unquote(mapped.headers["x-voice"]) == english
    assert_same_audio(mapped.content, speech(oa_api, english, response_format="pcm", **SMALL).content)
    upper = speech(oa_api, oa_voice.upper(), response_format="pcm", max_frames=1)  # names are case-blind
    assert upper.status_code == 200 and urllib.parse.unquote(upper.headers["x-voice"]) == oa_voice
    presets = {v["name"] for v in oa_api.get("/v1/voices").json()["data"] if v["available"]}
    for name in presets & {"Nova", "Cedar"}:  # a preset that shares an OpenAI name is that preset
        resp = speech(oa_api, name.lower(), response_format="pcm", max_frames=1)
        assert urllib.parse.unquote(resp.headers["x-voice"]) == name
    as_object = speech(oa_api, {"id": english}, response_format="pcm", **SMALL)
    assert as_object.status_code == 200
    assert_same_audio(as_object.content, mapped.content)


@pytest.mark.parametrize("fmt", ["pcm", "wav"])
def test_streamed_bytes_equal_buffered_bytes(oa_sdk: openai.OpenAI, oa_api: httpx.Client, oa_voice: str,
                                             fmt: str) -> None:
    buffered = speech(oa_api, oa_voice, response_format=fmt, **SMALL).content
    with oa_sdk.audio.speech.with_streaming_response.create(
        model="moss-tts-nano", voice=oa_voice, input=TEXT, response_format=fmt, stream_format="audio",
        extra_body=SMALL,
    ) as response:
        assert response.headers["x-sample-rate"] == "48000"
        streamed_sdk = b"".join(response.iter_bytes())
    with oa_api.stream("POST", "/v1/audio/speech", json={"input": TEXT, "voice": oa_voice,
                                                       "response_format": fmt, "stream": True, **SMALL}) as resp:
        assert resp.status_code == 200
        streamed_raw = b"".join(resp.iter_bytes())
    if fmt == "pcm":
        assert_same_audio(streamed_sdk, buffered)
        assert_same_audio(streamed_raw, buffered)
    else:
        assert streamed_raw[:4] == b"RIFF" and streamed_raw[4:8] == b"\xff\xff\xff\xff"  # streaming sizes
        assert_same_audio(wav_data(streamed_sdk), wav_data(buffered))
        assert_same_audio(wav_data(streamed_raw), wav_data(buffered))
        audio, sr = sf.read(io.BytesIO(streamed_raw), dtype="int16", always_2d=True)  # decodes as it is
        assert sr == SR and audio.shape[1] == 2
        assert_same_audio(audio, wav_data(buffered))


def test_voice_cloning_from_base64_and_data_url(oa_api: httpx.Client, oa_clip: bytes) -> None:
    b64 = base64.b64encode(oa_clip).decode()
    for ref in (b64, f"data:audio/wav;base64,{b64}"):
        resp = speech(oa_api, "alloy", response_format="pcm", ref_audio=ref, **SMALL)
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-voice"] == "reference" and len(resp.content) > 0
    resp = speech(oa_api, "alloy", response_format="wav", ref_audio=b64, ref_text="A short reference clip.", **SMALL)
    assert resp.status_code == 200, resp.text  # continuation mode
    assert sf.info(io.BytesIO(resp.content)).samplerate == SR


def test_remote_ref_audio_when_allowed(oa_service: SynthesizerService, oa_clip: bytes, oa_voice: str) -> None:
    files = {"/clip.wav": oa_clip, "/big.wav": b"\0" * (MAX_UPLOAD_BYTES + 1)}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = files.get(self.path)
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{httpd.server_address[1]}"
    app = FastAPI()
    install_error_handlers(app)
    # 127.0.0.1 is refused unless exempted exactly (tests/test_reliability.py covers the refusals).
    settings = settings_for(allow_remote_audio=True, remote_audio_allow_hosts=(origin.removeprefix("http://"),))
    app.include_router(build_openai_router(oa_service, settings))
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=120) as client:
            refused = speech(client, oa_voice, ref_audio=f"http://localhost:{httpd.server_address[1]}/clip.wav")
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "remote_audio_refused"
            ok = speech(client, oa_voice, response_format="pcm", ref_audio=f"{origin}/clip.wav", **SMALL)
            assert ok.status_code == 200, ok.text
            missing = speech(client, oa_voice, ref_audio=f"{origin}/missing.wav", **SMALL)
            assert missing.status_code == 400 and missing.json()["error"]["param"] == "ref_audio"
            big = speech(client, oa_voice, ref_audio=f"{origin}/big.wav", **SMALL)
            assert big.status_code == 413
            local = speech(client, oa_voice, ref_audio="file:///etc/passwd", **SMALL)
            assert local.status_code == 400
    finally:
        httpd.shutdown()
