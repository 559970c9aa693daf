"""The OpenAI-compatible speech API's errors and its busy server, against a real server (tiny
checkpoints): every bad field is OpenAI's JSON error naming it, before any audio; a full queue is 503
+ Retry-After; a client that leaves mid-stream frees its slot. Fixtures: `openai_helpers.py`.
"""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from support.openai_helpers import (
    MAX_TEXT_CHARS,
    MAX_UPLOAD_BYTES,
    SMALL,
    TEXT,
    speech,
)

from studio.service import SynthesizerService

pytestmark = pytest.mark.slow  # one real server for the module


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
def test_errors(oa_api: httpx.Client, oa_voice: str, data_dir: Path, fields: dict, status: int,
                param: str) -> None:
    body = {"model": "tts-1", "input": TEXT, "voice": oa_voice, **SMALL, **fields}
    _assert_clean_error(oa_api.post("/v1/audio/speech", json=body), status, param, data_dir)
    streamed = {**body, "response_format": "pcm", "stream": True} if "response_format" not in fields else body
    if "stream" not in fields:  # the streaming path validates everything before its first byte too
        _assert_clean_error(oa_api.post("/v1/audio/speech", json=streamed), status, param, data_dir)


def test_a_real_file_path_is_never_read(oa_api: httpx.Client, oa_voice: str, data_dir: Path) -> None:
    path = str(data_dir / "presets" / "en_2.wav")
    for ref in (path, f"file://{path}"):
        _assert_clean_error(speech(oa_api, oa_voice, ref_audio=ref, **SMALL), 400, "ref_audio", data_dir)


def test_malformed_json_body(oa_api: httpx.Client, data_dir: Path) -> None:
    resp = oa_api.post("/v1/audio/speech", content=b"{not json", headers={"content-type": "application/json"})
    _assert_clean_error(resp, 400, None, data_dir)
    _assert_clean_error(oa_api.post("/v1/audio/speech", json={"voice": "alloy"}), 400, "input", data_dir)


def test_sdk_raises_typed_errors(oa_sdk: openai.OpenAI, oa_voice: str) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        oa_sdk.audio.speech.create(model="tts-1", voice=oa_voice, input=TEXT, speed=4.5)
    assert bad.value.body["param"] == "speed"
    with pytest.raises(openai.NotFoundError) as missing:
        oa_sdk.audio.speech.create(model="tts-1", voice="nobody-by-this-name", input=TEXT)
    assert oa_voice in missing.value.body["message"]  # lists the valid presets


def test_an_unavailable_voice_is_refused_once_not_retried(oa_url: str, data_dir: Path) -> None:
    """A preset this server cannot speak (Sora: its voice data is not here, downloads are off) is a
    400 that says why in words, which the official SDK raises at once: a 503 would have it retry twice
    for nothing. Listed as unavailable with the same reason."""
    sent: list[str] = []
    with httpx.Client(event_hooks={"request": [lambda r: sent.append(r.url.path)]}, timeout=60) as http:
        sdk = openai.OpenAI(base_url=f"{oa_url}/v1", api_key="x", max_retries=2, http_client=http)
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.audio.speech.create(model="tts-1", voice="Sora", input=TEXT)
        listed = {v["name"]: v for v in http.get(f"{oa_url}/v1/voices").json()["data"]}
    assert sent == ["/v1/audio/speech", "/v1/voices"]  # no retry
    error = refused.value.body
    assert error["param"] == "voice" and error["code"] == "voice_unavailable"
    reason = listed["Sora"]["unavailable_reason"]
    assert not listed["Sora"]["available"] and "browser_poc_manifest.json" in reason
    assert error["message"] == f"voice 'Sora' is unavailable: it {reason}; choose another voice"
    for raw in ("http", "urlopen", "Errno", str(data_dir)):
        assert raw not in error["message"]


# ---- busy server and cancellation -------------------------------------------------------------


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the engine")
        time.sleep(0.02)


def test_queue_full_then_disconnect_cancels(oa_url: str, oa_service: SynthesizerService, oa_voice: str,
                                            data_dir: Path) -> None:
    """One slot, one queue place: hold a stream, queue a second, the third gets 503 + Retry-After;
    dropping the held stream's connection cancels it, which lets the queued one run."""
    synth = oa_service.get()
    long_text = " ".join(["This sentence keeps the only engine slot busy for a while."] * 8)
    before = synth.stats()
    held_client = httpx.Client(base_url=oa_url, timeout=120)
    queued: dict = {}
    try:
        held = held_client.send(
            held_client.build_request("POST", "/v1/audio/speech", json={
                "input": long_text, "voice": oa_voice, "response_format": "pcm", "stream": True, "seed": 1,
            }),
            stream=True,
        )
        assert held.status_code == 200
        body = held.iter_raw()  # keep a reference: dropping the iterator would close the connection
        next(body)  # first audio is out: the stream is running in the only slot
        assert synth.stats().active_streams == 1

        def run_queued() -> None:
            with httpx.Client(base_url=oa_url, timeout=120) as client:
                queued["response"] = speech(client, oa_voice, response_format="pcm", **SMALL)

        waiter = threading.Thread(target=run_queued, daemon=True)
        waiter.start()
        _wait_for(lambda: synth.stats().queued == 1)

        with httpx.Client(base_url=oa_url, timeout=120) as client:
            busy = speech(client, oa_voice, response_format="pcm", **SMALL)
            busy_stream = speech(client, oa_voice, response_format="wav", stream=True, **SMALL)
        for resp in (busy, busy_stream):
            error = _assert_clean_error(resp, 503, None, data_dir)
            assert error["code"] == "queue_full" and int(resp.headers["retry-after"]) >= 1
        assert synth.stats().refused == before.refused + 2
    finally:
        held_client.close()  # the client goes away mid-stream
    waiter.join(60)
    assert queued["response"].status_code == 200 and len(queued["response"].content) > 0
    _wait_for(lambda: synth.stats().cancelled == before.cancelled + 1)
    _wait_for(lambda: synth.stats().active_streams == 0 and synth.stats().queued == 0)


def test_buffered_request_survives_many_sequential_calls(oa_api: httpx.Client, oa_voice: str) -> None:
    """Slots are freed after each request: many quick calls in a row never see a 503."""
    for _ in range(6):
        assert speech(oa_api, oa_voice, response_format="pcm", seed=3, max_frames=2).status_code == 200
