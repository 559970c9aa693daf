"""The OpenAI-compatible speech API against a real server running the tiny checkpoints.

The server is the real app (`create_app`) served by uvicorn on a free 127.0.0.1 port in a
background thread; it is driven with the official `openai` SDK and with raw httpx. The engine has
one slot and a one-request queue, so the busy (503) and cancellation cases are easy to provoke.
"""

from __future__ import annotations

import base64
import io
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from fastapi import FastAPI
from server_helpers import ServerThread
from stream_decoding import decode_progressively

from tts_core.config import EngineConfig
from tts_core.web.app import create_app
from tts_core.web.errors import install_error_handlers
from tts_core.web.openai_api import build_openai_router
from tts_core.web.service import SynthesizerService
from tts_core.web.settings import ServerSettings

pytestmark = pytest.mark.slow  # one real server for the module: ~25-40 s in all on 2 cores

SR = 48_000
TEXT = "Hello there."
SMALL = {"seed": 7, "max_frames": 5}  # 5 frames = 0.4 s of audio: quick on the tiny model
MAX_TEXT_CHARS = 1500
MAX_UPLOAD_BYTES = 256 * 1024
FORMATS = ("wav", "flac", "mp3", "opus", "aac", "pcm")


# ---- servers ----------------------------------------------------------------------------------


def _settings(**overrides) -> ServerSettings:
    return ServerSettings(max_text_chars=MAX_TEXT_CHARS, max_upload_bytes=MAX_UPLOAD_BYTES, **overrides)


@pytest.fixture(scope="module")
def service(data_dir: Path, tmp_path_factory) -> SynthesizerService:
    from tts_core.synthesizer import Synthesizer

    parity = data_dir / "parity"

    def factory(report):
        return Synthesizer.from_pretrained(
            str(parity / "tiny_lm"), str(parity / "tiny_codec"), device="cpu",
            tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
            voices_dir=str(data_dir / "presets"), cache_dir=tmp_path_factory.mktemp("voice_cache"),
            engine_config=EngineConfig(max_active_streams=1, max_queue=1, max_text_chars=MAX_TEXT_CHARS),
            allow_download=False, warmup=False, report=report,
        )

    svc = SynthesizerService(factory)
    svc.start(background=False)
    assert svc.wait(0), f"tiny model failed to load: {svc.error}"
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def base_url(service: SynthesizerService, data_dir: Path) -> str:
    settings = _settings(lm_id=str(data_dir / "parity" / "tiny_lm"), codec_id=str(data_dir / "parity" / "tiny_codec"))
    with ServerThread(create_app(service, settings)) as server:
        yield server.url


@pytest.fixture(scope="module")
def api(base_url: str) -> httpx.Client:
    with httpx.Client(base_url=base_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def default_voice(api: httpx.Client) -> str:
    return api.get("/v1/voices").json()["default"]


@pytest.fixture(scope="module")
def clip_wav(data_dir: Path) -> bytes:
    """A 1.5 s reference clip cut from a preset, as a small mono 24 kHz WAV (server resamples)."""
    audio, sr = sf.read(data_dir / "presets" / "en_2.wav", dtype="float32", always_2d=True)
    start = int(0.5 * sr)
    clip = audio[start : start + int(1.5 * sr)].mean(axis=1)[::2]
    out = io.BytesIO()
    sf.write(out, clip, sr // 2, format="WAV", subtype="PCM_16")
    return out.getvalue()


def _speech(api: httpx.Client, voice: str, **fields) -> httpx.Response:
    return api.post("/v1/audio/speech", json={"model": "moss-tts-nano", "input": TEXT, "voice": voice, **fields})


def _pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").reshape(-1, 2)  # [n, 2]


def _assert_same_audio(a: bytes | np.ndarray, b: bytes | np.ndarray) -> None:
    """Same length and the same samples, up to 1 LSB of int16.

    Same seed -> same codes, but how many frames the codec decodes per call follows wall-clock pacing,
    and decoding 2 frames at once vs 1 + 1 differs by float rounding (~4e-6, 1 LSB of int16).
    """
    a = _pcm(a) if isinstance(a, bytes) else a
    b = _pcm(b) if isinstance(b, bytes) else b
    assert a.shape == b.shape and a.shape[0] > 0, (a.shape, b.shape)
    assert int(np.abs(a.astype(np.int32) - b).max()) <= 1


def _wav_data(data: bytes) -> bytes:
    """The payload of a WAV file's data chunk (its size field may be a streaming placeholder)."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    pos = 12
    while data[pos : pos + 4] != b"data":
        pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
    return data[pos + 8 :]


# ---- listing routes ---------------------------------------------------------------------------


def test_models_list(api: httpx.Client, data_dir: Path) -> None:
    resp = api.get("/v1/models")
    assert resp.status_code == 200
    body = resp.json()
    ids = [m["id"] for m in body["data"]]
    assert body["object"] == "list" and ids[0] == "moss-tts-nano" and "tts-1" in ids
    assert all(m["object"] == "model" for m in body["data"])
    assert str(data_dir) not in resp.text and "tiny_lm" not in resp.text  # a local checkpoint path never leaks
    assert api.get("/v1/models/tts-1").json()["id"] == "tts-1"
    assert api.get("/v1/models/whisper-1").status_code == 404


def test_voices_list(api: httpx.Client, default_voice: str) -> None:
    body = api.get("/v1/voices").json()
    names = [v["name"] for v in body["data"]]
    assert default_voice in names
    for voice in body["data"]:
        assert set(voice) == {"name", "language", "gender", "description", "available", "unavailable_reason"}
    assert any(v["available"] for v in body["data"])


def test_openapi_documents_the_routes(api: httpx.Client) -> None:
    spec = api.get("/openapi.json").json()
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
    assert api.get("/docs").status_code == 200


# ---- audio ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_pcm(api: httpx.Client, default_voice: str) -> np.ndarray:
    resp = _speech(api, default_voice, response_format="pcm", **SMALL)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "audio/pcm"
    assert resp.headers["x-sample-rate"] == "48000" and resp.headers["x-channels"] == "2"
    pcm = _pcm(resp.content)
    assert pcm.shape[0] > 0 and np.abs(pcm).max() > 0
    return pcm


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_decodes_to_48k_stereo_of_the_same_length(
    sdk: openai.OpenAI, default_voice: str, reference_pcm: np.ndarray, fmt: str
) -> None:
    result = sdk.audio.speech.create(model="moss-tts-nano", voice=default_voice, input=TEXT, response_format=fmt,
                                     extra_body=SMALL)
    headers = result.response.headers
    assert headers["x-sample-rate"] == "48000" and headers["x-channels"] == "2" and headers["x-audio-format"] == fmt
    if fmt == "pcm":
        _assert_same_audio(result.content, reference_pcm)
        return
    if fmt == "aac":  # ADTS: PyAV decodes it (libsndfile cannot); the encoder adds its priming samples
        decoded = decode_progressively("aac", [result.content])
        assert decoded.rate == SR and decoded.channels == 2
        assert 0 <= decoded.samples - reference_pcm.shape[0] <= 3 * 1024
        return
    audio, sr = sf.read(io.BytesIO(result.content), dtype="int16", always_2d=True)
    assert sr == SR and audio.shape[1] == 2
    assert audio.shape[0] == reference_pcm.shape[0], f"{fmt}: {audio.shape[0]} vs {reference_pcm.shape[0]}"
    if fmt in ("wav", "flac"):  # lossless: the very same samples
        _assert_same_audio(audio, reference_pcm)


def test_same_seed_same_audio_and_greedy_is_deterministic(api: httpx.Client, default_voice: str) -> None:
    first = _speech(api, default_voice, response_format="pcm", **SMALL).content
    _assert_same_audio(_speech(api, default_voice, response_format="pcm", **SMALL).content, first)
    other_seed = _pcm(_speech(api, default_voice, response_format="pcm", seed=8, max_frames=5).content)
    assert other_seed.shape != _pcm(first).shape or np.abs(other_seed.astype(np.int32) - _pcm(first)).max() > 100
    greedy = [_speech(api, default_voice, response_format="pcm", greedy=True, max_frames=5).content for _ in "ab"]
    _assert_same_audio(*greedy)


def test_openai_voice_names_map_to_the_default_preset(api: httpx.Client, default_voice: str) -> None:
    mapped = _speech(api, "alloy", response_format="pcm", **SMALL)
    assert mapped.status_code == 200
    assert urllib.parse.unquote(mapped.headers["x-voice"]) == default_voice
    _assert_same_audio(mapped.content, _speech(api, default_voice, response_format="pcm", **SMALL).content)
    upper = _speech(api, default_voice.upper(), response_format="pcm", max_frames=1)  # names are case-blind
    assert upper.status_code == 200 and urllib.parse.unquote(upper.headers["x-voice"]) == default_voice
    presets = {v["name"] for v in api.get("/v1/voices").json()["data"] if v["available"]}
    for name in presets & {"Nova", "Cedar"}:  # a preset that shares an OpenAI name is that preset
        resp = _speech(api, name.lower(), response_format="pcm", max_frames=1)
        assert urllib.parse.unquote(resp.headers["x-voice"]) == name
    as_object = _speech(api, {"id": default_voice}, response_format="pcm", **SMALL)
    assert as_object.status_code == 200
    _assert_same_audio(as_object.content, mapped.content)


@pytest.mark.parametrize("fmt", ["pcm", "wav"])
def test_streamed_bytes_equal_buffered_bytes(sdk: openai.OpenAI, api: httpx.Client, default_voice: str,
                                             fmt: str) -> None:
    buffered = _speech(api, default_voice, response_format=fmt, **SMALL).content
    with sdk.audio.speech.with_streaming_response.create(
        model="moss-tts-nano", voice=default_voice, input=TEXT, response_format=fmt, stream_format="audio",
        extra_body=SMALL,
    ) as response:
        assert response.headers["x-sample-rate"] == "48000"
        streamed_sdk = b"".join(response.iter_bytes())
    with api.stream("POST", "/v1/audio/speech", json={"input": TEXT, "voice": default_voice,
                                                       "response_format": fmt, "stream": True, **SMALL}) as resp:
        assert resp.status_code == 200
        streamed_raw = b"".join(resp.iter_bytes())
    if fmt == "pcm":
        _assert_same_audio(streamed_sdk, buffered)
        _assert_same_audio(streamed_raw, buffered)
    else:
        assert streamed_raw[:4] == b"RIFF" and streamed_raw[4:8] == b"\xff\xff\xff\xff"  # streaming sizes
        _assert_same_audio(_wav_data(streamed_sdk), _wav_data(buffered))
        _assert_same_audio(_wav_data(streamed_raw), _wav_data(buffered))
        audio, sr = sf.read(io.BytesIO(streamed_raw), dtype="int16", always_2d=True)  # decodes as it is
        assert sr == SR and audio.shape[1] == 2
        _assert_same_audio(audio, _wav_data(buffered))


def test_voice_cloning_from_base64_and_data_url(api: httpx.Client, clip_wav: bytes) -> None:
    b64 = base64.b64encode(clip_wav).decode()
    for ref in (b64, f"data:audio/wav;base64,{b64}"):
        resp = _speech(api, "alloy", response_format="pcm", ref_audio=ref, **SMALL)
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-voice"] == "reference" and len(resp.content) > 0
    resp = _speech(api, "alloy", response_format="wav", ref_audio=b64, ref_text="A short reference clip.", **SMALL)
    assert resp.status_code == 200, resp.text  # continuation mode
    assert sf.info(io.BytesIO(resp.content)).samplerate == SR


def test_remote_ref_audio_when_allowed(service: SynthesizerService, clip_wav: bytes, default_voice: str) -> None:
    files = {"/clip.wav": clip_wav, "/big.wav": b"\0" * (MAX_UPLOAD_BYTES + 1)}

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
    settings = _settings(allow_remote_audio=True, remote_audio_allow_hosts=(origin.removeprefix("http://"),))
    app.include_router(build_openai_router(service, settings))
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=120) as client:
            refused = _speech(client, default_voice, ref_audio=f"http://localhost:{httpd.server_address[1]}/clip.wav")
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "remote_audio_refused"
            ok = _speech(client, default_voice, response_format="pcm", ref_audio=f"{origin}/clip.wav", **SMALL)
            assert ok.status_code == 200, ok.text
            missing = _speech(client, default_voice, ref_audio=f"{origin}/missing.wav", **SMALL)
            assert missing.status_code == 400 and missing.json()["error"]["param"] == "ref_audio"
            big = _speech(client, default_voice, ref_audio=f"{origin}/big.wav", **SMALL)
            assert big.status_code == 413
            local = _speech(client, default_voice, ref_audio="file:///etc/passwd", **SMALL)
            assert local.status_code == 400
    finally:
        httpd.shutdown()


# ---- errors -----------------------------------------------------------------------------------


def _assert_clean_error(resp: httpx.Response, status: int, param: str | None, data_dir: Path) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param, error
    for leak in ("Traceback", str(data_dir), "/work", "/tmp", "site-packages", ".py\"", "File \""):
        assert leak not in resp.text, (leak, resp.text)
    return error


_NOT_AUDIO = base64.b64encode(b"this is plain text, not an audio file at all. " * 40).decode()

ERROR_CASES = [
    ({"input": ""}, 400, "input"),
    ({"input": "   \n"}, 400, "input"),
    ({"input": "a" * (MAX_TEXT_CHARS + 1)}, 400, "input"),
    ({"response_format": "ogg"}, 400, "response_format"),
    ({"speed": 4.5}, 400, "speed"),
    ({"speed": 0.2}, 400, "speed"),
    ({"speed": "fast"}, 400, "speed"),
    ({"sample_rate": 12345}, 400, "sample_rate"),
    ({"sample_rate": 44100, "response_format": "opus"}, 400, "sample_rate"),
    ({"timestamps": True}, 400, "timestamps"),
    ({"stream_format": "websocket"}, 400, "stream_format"),
    ({"voice": "voice_0123456789abcdef01234567"}, 404, "voice"),
    ({"voice": "nobody-by-this-name"}, 404, "voice"),
    ({"model": "whisper-1"}, 404, "model"),
    ({"ref_audio": base64.b64encode(b"\0" * (MAX_UPLOAD_BYTES + 10)).decode()}, 413, "ref_audio"),
    # decodes to more than MAX_UPLOAD_BYTES while the body stays under the server's body cap
    # (a body over the cap is refused before parsing, with param None: see test_reliability.py)
    ({"ref_audio": "data:audio/wav;base64," + "A" * (MAX_UPLOAD_BYTES * 4 // 3 + 4096)}, 413, "ref_audio"),
    ({"ref_audio": "/etc/passwd"}, 400, "ref_audio"),
    ({"ref_audio": "./voice.wav"}, 400, "ref_audio"),
    ({"ref_audio": "~/voice.wav"}, 400, "ref_audio"),
    ({"ref_audio": "C:\\voices\\a.wav"}, 400, "ref_audio"),
    ({"ref_audio": "file:///etc/passwd"}, 400, "ref_audio"),
    ({"ref_audio": "http://127.0.0.1:9/voice.wav"}, 400, "ref_audio"),
    ({"ref_audio": "ftp://example.com/voice.wav"}, 400, "ref_audio"),
    ({"ref_audio": "not base64 at all!"}, 400, "ref_audio"),
    ({"ref_audio": "data:audio/wav;base64,@@@@"}, 400, "ref_audio"),
    ({"ref_audio": _NOT_AUDIO}, 400, "ref_audio"),
    ({"ref_text": "transcript without a clip"}, 400, "ref_text"),
    ({"temperature": 0}, 400, "temperature"),
    ({"temperature": "hot"}, 400, "temperature"),
    ({"top_p": 1.5}, 400, "top_p"),
    ({"top_k": -1}, 400, "top_k"),
    ({"repetition_penalty": 0.5}, 400, "repetition_penalty"),
    ({"text_temperature": -1.0}, 400, "text_temperature"),
    ({"greedy": True, "do_sample": True}, 400, "greedy"),
    ({"seed": -1}, 400, "seed"),
    ({"max_frames": 0}, 400, "max_frames"),
    ({"temprature": 0.5}, 400, "temprature"),
]


@pytest.mark.parametrize(("fields", "status", "param"), ERROR_CASES, ids=[f"{c[2]}-{i}" for i, c in enumerate(ERROR_CASES)])
def test_errors(api: httpx.Client, default_voice: str, data_dir: Path, fields: dict, status: int,
                param: str) -> None:
    body = {"model": "tts-1", "input": TEXT, "voice": default_voice, **SMALL, **fields}
    _assert_clean_error(api.post("/v1/audio/speech", json=body), status, param, data_dir)
    streamed = {**body, "response_format": "pcm", "stream": True} if "response_format" not in fields else body
    if "stream" not in fields:  # the streaming path validates everything before its first byte too
        _assert_clean_error(api.post("/v1/audio/speech", json=streamed), status, param, data_dir)


def test_a_real_file_path_is_never_read(api: httpx.Client, default_voice: str, data_dir: Path) -> None:
    path = str(data_dir / "presets" / "en_2.wav")
    for ref in (path, f"file://{path}"):
        _assert_clean_error(_speech(api, default_voice, ref_audio=ref, **SMALL), 400, "ref_audio", data_dir)


def test_malformed_json_body(api: httpx.Client, data_dir: Path) -> None:
    resp = api.post("/v1/audio/speech", content=b"{not json", headers={"content-type": "application/json"})
    _assert_clean_error(resp, 400, None, data_dir)
    _assert_clean_error(api.post("/v1/audio/speech", json={"voice": "alloy"}), 400, "input", data_dir)


def test_sdk_raises_typed_errors(sdk: openai.OpenAI, default_voice: str) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.audio.speech.create(model="tts-1", voice=default_voice, input=TEXT, speed=4.5)
    assert bad.value.body["param"] == "speed"
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.audio.speech.create(model="tts-1", voice="nobody-by-this-name", input=TEXT)
    assert default_voice in missing.value.body["message"]  # lists the valid presets


# ---- busy server and cancellation -------------------------------------------------------------


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the engine")
        time.sleep(0.02)


def test_queue_full_then_disconnect_cancels(base_url: str, service: SynthesizerService, default_voice: str,
                                            data_dir: Path) -> None:
    """One slot, one queue place: hold a stream, queue a second, the third gets 503 + Retry-After;
    dropping the held stream's connection cancels it, which lets the queued one run."""
    synth = service.get()
    long_text = " ".join(["This sentence keeps the only engine slot busy for a while."] * 8)
    before = synth.stats()
    held_client = httpx.Client(base_url=base_url, timeout=120)
    queued: dict = {}
    try:
        held = held_client.send(
            held_client.build_request("POST", "/v1/audio/speech", json={
                "input": long_text, "voice": default_voice, "response_format": "pcm", "stream": True, "seed": 1,
            }),
            stream=True,
        )
        assert held.status_code == 200
        body = held.iter_raw()  # keep a reference: dropping the iterator would close the connection
        next(body)  # first audio is out: the stream is running in the only slot
        assert synth.stats()["active_streams"] == 1

        def run_queued() -> None:
            with httpx.Client(base_url=base_url, timeout=120) as client:
                queued["response"] = _speech(client, default_voice, response_format="pcm", **SMALL)

        waiter = threading.Thread(target=run_queued, daemon=True)
        waiter.start()
        _wait_for(lambda: synth.stats()["queued"] == 1)

        with httpx.Client(base_url=base_url, timeout=120) as client:
            busy = _speech(client, default_voice, response_format="pcm", **SMALL)
            busy_stream = _speech(client, default_voice, response_format="wav", stream=True, **SMALL)
        for resp in (busy, busy_stream):
            error = _assert_clean_error(resp, 503, None, data_dir)
            assert error["code"] == "queue_full" and int(resp.headers["retry-after"]) >= 1
        assert synth.stats()["refused"] == before["refused"] + 2
    finally:
        held_client.close()  # the client goes away mid-stream
    waiter.join(60)
    assert queued["response"].status_code == 200 and len(queued["response"].content) > 0
    _wait_for(lambda: synth.stats()["cancelled"] == before["cancelled"] + 1)
    _wait_for(lambda: synth.stats()["active_streams"] == 0 and synth.stats()["queued"] == 0)


def test_buffered_request_survives_many_sequential_calls(api: httpx.Client, default_voice: str) -> None:
    """Slots are freed after each request: many quick calls in a row never see a 503."""
    for _ in range(6):
        assert _speech(api, default_voice, response_format="pcm", seed=3, max_frames=2).status_code == 200
