"""POST /api/tts/stream over real HTTP against `python app.py` (tiny checkpoints).

Event frames of Opus (the default) or 16-bit PCM (docs/PROTOCOL.md §2); errors are JSON 4xx naming
the field, sent before any audio; a client that disconnects cancels its request and frees the engine slot.
"""

from __future__ import annotations

import base64
import time

import httpx
import numpy as np
import pytest

from bench.lib.player_stream import parse_frames, player_stream

pytestmark = pytest.mark.e2e

SAMPLES_PER_FRAME = 3840  # per channel: 80 ms at 48 kHz
LONG_TEXT = " ".join(f"This is sentence number {i}, and it keeps the stream busy for a while." for i in range(40))


@pytest.fixture(scope="module")
def client(app_server):
    with httpx.Client(base_url=app_server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def voices(client) -> dict:
    return client.get("/api/voices").json()


def _stream(client: httpx.Client, **body) -> httpx.Response:
    return client.post("/api/tts/stream", json=body)


def _audio_bytes(response: httpx.Response) -> bytes:
    return b"".join(payload for kind, payload in parse_frames(response.content) if kind == 0)


def _why(response: httpx.Response) -> str:
    """A readable assertion message: the JSON error, or the size of an audio body."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.text
    return f"HTTP {response.status_code}, {len(response.content)} bytes of {response.headers.get('content-type')}"


def test_stream_headers_and_length(client, voices):
    voice = next(v["name"] for v in voices["voices"] if v["available"] and v["name"] != voices["default"])
    response = _stream(client, text="Hello there, how are you today?", voice=voice, seed=7, max_frames=6)
    assert response.status_code == 200, _why(response)
    assert response.headers["x-sample-rate"] == "48000"
    assert response.headers["x-channels"] == "2"
    assert response.headers["x-sample-format"] == "opus" and response.headers["x-transport"] == "opus"
    assert len(response.headers["x-request-id"]) >= 8
    assert response.headers["content-type"] == "application/octet-stream"
    assert "x-framing" not in response.headers  # always event frames: nothing to announce
    pcm, events = player_stream(response.content, "opus")
    assert pcm.shape == (2, 6 * SAMPLES_PER_FRAME)  # exact after the pre-skip and the end trim
    assert np.isfinite(pcm).all() and float(np.abs(pcm).max()) > 0
    assert events[-1]["type"] == "speech.done"


def test_same_seed_same_audio_and_default_length(client):
    first = _stream(client, text="Same seed, same sound.", seed=3, transport="s16")
    second = _stream(client, text="Same seed, same sound.", seed=3, transport="s16")
    assert first.status_code == second.status_code == 200
    assert first.headers["x-sample-format"] == "s16le"
    a, b = _audio_bytes(first), _audio_bytes(second)
    assert len(a) > 0 and len(a) % (SAMPLES_PER_FRAME * 4) == 0  # whole codec frames of 16-bit stereo
    # Same request, same audio, bit for bit (on the CPU: tests/engine/test_cpu_determinism.py).
    assert a == b


def test_clone_from_base64_and_data_url(client, data_dir):
    clip = (data_dir / "finetune_sample" / "7.wav").read_bytes()
    encoded = base64.b64encode(clip).decode()
    for ref_audio in (encoded, f"data:audio/wav;base64,{encoded}"):
        response = _stream(client, text="Cloned from a short clip.", ref_audio=ref_audio, seed=1, max_frames=4,
                           transport="s16")
        assert response.status_code == 200, _why(response)
        assert len(_audio_bytes(response)) == 4 * SAMPLES_PER_FRAME * 4


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"text": "   "}, 400, "text"),
        ({"text": "hi", "voice": "NoSuchVoice"}, 404, "voice"),
        ({"text": "hi", "audio_temperature": 0}, 400, "audio_temperature"),
        ({"text": "hi", "audio_top_k": -1}, 400, "audio_top_k"),
        ({"text": "hi", "seed": -5}, 400, "seed"),
        ({"text": "hi", "max_frames": 0}, 400, "max_frames"),
        ({"text": "hi", "mode": "sing"}, 400, "mode"),
        ({"text": "hi", "temprature": 0.5}, 400, "temprature"),
        ({"voice": "x"}, 400, "text"),
        ({"text": "x" * 5000}, 400, "text"),
        ({"text": "hi", "ref_audio": "not base64 !!"}, 400, "ref_audio"),
        ({"text": "hi", "ref_audio": "/etc/passwd"}, 400, "ref_audio"),
        ({"text": "hi", "ref_audio": "https://example.com/a.wav"}, 400, "ref_audio"),
        ({"text": "hi", "ref_text": "a transcript without a clip"}, 400, "ref_text"),
        ({"text": "hi", "ref_audio_id": "0123456789abcdef01234567"}, 400, "ref_audio_id"),
        ({"text": "hi", "transport": "f32"}, 400, "transport"),
        ({"text": "hi", "framing": "events"}, 400, "framing"),  # always framed: the field went
    ],
)
def test_bad_input_is_a_json_error_naming_the_field(client, body, status, param):
    response = _stream(client, **body)
    assert response.status_code == status, _why(response)
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["param"] == param
    assert error["message"] and "Traceback" not in error["message"]


def test_undecodable_clip_fails_before_streaming(client):
    junk = base64.b64encode(b"RIFF but not really a wave file" * 10).decode()
    response = _stream(client, text="hi", ref_audio=junk)
    assert 400 <= response.status_code < 500, _why(response)
    assert response.json()["error"]["param"] == "ref_audio"


def test_abort_mid_stream_frees_the_engine_slot(client, app_server):
    before = app_server.wait_for_idle()
    body = {"text": LONG_TEXT, "seed": 1, "transport": "s16"}
    with client.stream("POST", "/api/tts/stream", json=body) as response:
        assert response.status_code == 200
        pieces = response.iter_raw()  # next(), not a for-break: leaving the loop would close the stream
        received = 0
        while received < SAMPLES_PER_FRAME * 4:
            received += len(next(pieces))
        during = app_server.health()
        assert during["active_streams"] + during["queued"] == 1, (during, app_server.log_tail())
    aborted_at = time.monotonic()  # leaving the block closed the connection mid-stream
    after = app_server.wait_for_idle(timeout_s=10)
    freed_after_s = time.monotonic() - aborted_at
    assert after["cancelled"] == before["cancelled"] + 1, (before, after)
    assert after["finished"] == before["finished"], "the stream ran to its end instead of being cancelled"
    print(f"slot freed {freed_after_s * 1000:.0f} ms after the client went away")


def test_health_and_voice_clips(client, voices):
    health = client.get("/health").json()
    assert health["status"] == "ready"
    for key in ("active_streams", "queued", "max_active_streams", "device", "stats"):
        assert key in health
    # The resolved engine features (engine/features.py): what runs on this CPU, nothing GPU-only.
    [features] = health["engine_features"]
    assert features["device"] == "cpu" and features["compile"] == "off"
    assert not features["cuda_graphs"] and not features["fused_kernels"] and not features["step_ahead"]
    assert features["engine_prepares"] and not features["split_readout"]
    # The one configuration, as resolved: flags and environment, the slots and threads by the machine.
    config = health["config"]
    assert set(config) == {"engine", "load", "server", "page"}
    assert config["engine"]["max_active_streams"] == health["max_active_streams"] >= 1
    assert config["load"]["threads"] == health["threads"] and config["page"] == {"mode": "deferred", "zerogpu": False}
    assert config["load"]["lm"] == config["server"]["lm_id"] == "local checkpoint"  # no path leaves the server
    name = voices["default"]
    clip = client.get(f"/api/voices/{name}/clip")
    assert clip.status_code == 200
    assert clip.headers["content-type"].startswith("audio/")
    assert len(clip.content) > 10_000
    missing = client.get("/api/voices/NoSuchVoice/clip")
    assert missing.status_code == 404
    assert missing.json()["error"]["param"] == "name"
    assert client.get("/api/voices/..%2F..%2Fetc%2Fpasswd/clip").status_code == 404


# ---- speed, X-Estimated-Duration, event frames, saved voices (docs/PROTOCOL.md §2.3) ----------------


def test_speed_and_estimated_duration(client):
    body = {"text": "Hello there, how are you today?", "seed": 7, "max_frames": 6, "transport": "s16"}
    normal = _stream(client, **body)
    fast = _stream(client, **body, speed=2.0)
    slow = _stream(client, **body, speed=0.5)
    assert normal.status_code == fast.status_code == slow.status_code == 200, _why(fast)
    samples = 6 * SAMPLES_PER_FRAME
    assert len(_audio_bytes(fast)) == round(samples / 2.0) * 4 and len(_audio_bytes(slow)) == samples * 2 * 4
    estimate = float(normal.headers["x-estimated-duration"])
    assert estimate > 0
    assert abs(float(fast.headers["x-estimated-duration"]) - estimate / 2) <= 0.01
    assert abs(float(slow.headers["x-estimated-duration"]) - estimate * 2) <= 0.01


@pytest.mark.parametrize(("body", "param"), [({"speed": 0.1}, "speed"), ({"speed": 5}, "speed"),
                                              ({"speed": "fast"}, "speed"), ({"transport": "mp3"}, "transport")])
def test_bad_speed_or_transport(client, body, param):
    response = _stream(client, text="hi", **body)
    assert response.status_code == 400, _why(response)
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize("speed", [1.0, 1.5])
def test_event_frames(client, speed):
    text = "First sentence here. Then a second one."
    pcm_stream = _stream(client, text=text, seed=4, max_frames=8, speed=speed, transport="s16")
    opus_stream = _stream(client, text=text, seed=4, max_frames=8, speed=speed)
    assert pcm_stream.status_code == opus_stream.status_code == 200, _why(pcm_stream)
    frames = parse_frames(pcm_stream.content)
    assert {kind for kind, _ in frames} == {0, 1}
    assert all(len(payload) % 4 == 0 and payload for kind, payload in frames if kind == 0)
    pcm, events = player_stream(pcm_stream.content, "s16le")
    assert events[-1]["type"] == "speech.done" and events[-1]["request_id"] == pcm_stream.headers["x-request-id"]
    segments = events[:-1]
    assert segments and all(e["type"] == "speech.segment" for e in segments)
    assert [e["index"] for e in segments] == list(range(len(segments)))
    assert abs(events[-1]["audio_s"] - pcm.shape[1] / 48000) < 1e-3
    assert abs(segments[-1]["end"] - pcm.shape[1] / 48000) < 0.01
    opus, opus_events = player_stream(opus_stream.content, "opus")
    assert opus.shape == pcm.shape  # the same length in either transport
    assert [e["type"] for e in opus_events] == [e["type"] for e in events]


def test_voices_lists_saved_voices(client):
    body = client.get("/api/voices").json()
    assert isinstance(body["saved"], list)
    for voice in body["saved"]:
        assert voice["id"].startswith("voice_") and voice["name"]
