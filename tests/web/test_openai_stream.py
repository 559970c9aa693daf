"""Speech API round 2 against a real server (tiny checkpoints): SSE, progressive mp3/opus/aac/flac,
OpenAI's pcm for its model names, `sample_rate`, `speed`, captions, `instructions`.

Driven with the official `openai` SDK and raw httpx. Compressed streams are decoded by PyAV while
they arrive (`stream_decoding.StreamingDecoder`). The engine splits text into segments of at most
4 tokens here, so a few short sentences give several caption segments.
"""

from __future__ import annotations

import base64
import itertools
import re
import time

import httpx
import numpy as np
import openai
import pytest
import soxr
from support.server_helpers import ServerThread, tiny_synthesizer_factory
from support.stream_decoding import StreamingDecoder, decode_progressively, parse_sse, sse_audio

from studio.app import create_app
from studio.service import SynthesizerService
from studio.settings import ServerSettings
from tts_core.config import EngineConfig

pytestmark = pytest.mark.slow

SR = 48_000
TEXT = "Hello there."
SMALL = {"seed": 7, "max_frames": 6}
CAPTIONED = "One sentence. Two more words. And three."


@pytest.fixture(scope="module")
def served(data_dir, tmp_path_factory):
    """(url, app) of the server under test."""
    factory = tiny_synthesizer_factory(
        data_dir, tmp_path_factory.mktemp("cache"),
        EngineConfig(max_active_streams=2, max_queue=4, voice_clone_max_text_tokens=4))

    service = SynthesizerService(factory)
    service.start(background=False)
    assert service.wait(0), service.error
    app = create_app(service, ServerSettings())
    with ServerThread(app) as server:
        yield server.url, app
    service.close()


@pytest.fixture(scope="module")
def base_url(served) -> str:
    return served[0]


@pytest.fixture(scope="module")
def api(base_url: str) -> httpx.Client:
    with httpx.Client(base_url=base_url, timeout=180) as client:
        yield client


@pytest.fixture(scope="module")
def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=180)


def _post(api: httpx.Client, **fields) -> httpx.Response:
    resp = api.post("/v1/audio/speech", json={"model": "moss-tts-nano", "input": TEXT, **fields})
    assert resp.status_code == 200, resp.text
    return resp


def _s16(data: bytes, channels: int = 2) -> np.ndarray:
    return np.frombuffer(data, "<i2").reshape(-1, channels).astype(np.int32)


def _same(a: np.ndarray, b: np.ndarray) -> None:
    """Same length, same samples: on the CPU a request's audio is a function of the request alone,
    however it is chunked (tests/engine/test_cpu_determinism.py)."""
    assert a.shape == b.shape and a.shape[0] > 0, (a.shape, b.shape)
    assert np.array_equal(a, b), f"{int((a != b).sum())} samples differ"


@pytest.fixture(scope="module")
def default_voice(api: httpx.Client) -> str:
    """The preset a request without `voice` gets (OpenAI's voice names pick one by the input's language)."""
    return api.get("/v1/voices").json()["default"]


@pytest.fixture(scope="module")
def buffered_pcm(api: httpx.Client) -> np.ndarray:
    return _s16(_post(api, response_format="pcm", **SMALL).content)


# ---- SSE ----------------------------------------------------------------------------------------


def test_sse_with_the_sdk_equals_the_whole_response(sdk: openai.OpenAI, buffered_pcm: np.ndarray,
                                                    default_voice: str) -> None:
    with sdk.audio.speech.with_streaming_response.create(
        model="moss-tts-nano", voice=default_voice, input=TEXT, stream_format="sse", extra_body=SMALL,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-audio-format"] == "pcm" and response.headers["x-sample-rate"] == "48000"
        events = parse_sse(response.iter_lines())
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert all(isinstance(e["audio"], str) and e["audio"] for e in events[:-1])
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["output_tokens"] == SMALL["max_frames"] and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    _same(_s16(sse_audio(events)), buffered_pcm)


@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_sse_in_a_compressed_format_decodes_as_it_arrives(api: httpx.Client, fmt: str) -> None:
    decoder = StreamingDecoder(fmt)
    with api.stream("POST", "/v1/audio/speech", json={"input": TEXT, "stream_format": "sse", "response_format": fmt,
                                                      "seed": 7, "max_frames": 25}) as resp:
        assert resp.status_code == 200
        events = []
        for line in resp.iter_lines():
            if line.startswith("data:"):
                events += parse_sse([line])
                if events[-1]["type"] == "speech.audio.delta":
                    decoder.feed(base64.b64decode(events[-1]["audio"]))
    decoder.close()
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2 and events[-1]["type"] == "speech.audio.done"
    assert decoder.pieces_before_first is not None and decoder.pieces_before_first < len(deltas)
    assert abs(decoder.samples / decoder.rate - 25 * 0.08) < 0.1


# ---- progressive compressed streams -------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_compressed_formats_stream_progressively(api: httpx.Client, sdk: openai.OpenAI, fmt: str) -> None:
    """stream_format 'audio': the bytes come as they are generated and decode from the first pieces."""
    body = {"input": TEXT, "response_format": fmt, "stream_format": "audio", "seed": 3, "max_frames": 40}
    decoder = StreamingDecoder(fmt)
    with api.stream("POST", "/v1/audio/speech", json=body) as resp:
        assert resp.status_code == 200 and resp.headers["x-audio-format"] == fmt
        assert "content-length" not in resp.headers  # sent as generated, not as one file
        assert float(resp.headers["x-estimated-duration"]) > 0
        for piece in resp.iter_bytes():
            decoder.feed(piece)
    decoder.close()
    total = decoder.fed
    assert decoder.first_audio_after is not None and decoder.first_audio_after < total, (fmt, decoder.first_audio_after)
    assert decoder.rate == SR and decoder.channels == 2
    assert 40 * 0.08 - 1e-3 <= decoder.samples / SR <= 40 * 0.08 + 0.1
    with sdk.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=TEXT,
                                                         response_format=fmt, stream_format="audio",
                                                         extra_body={"seed": 3, "max_frames": 40}) as response:
        via_sdk = decode_progressively(fmt, response.iter_bytes())
    assert via_sdk.samples == decoder.samples  # the same stream through the SDK


def test_stream_true_works_for_every_format(api: httpx.Client) -> None:
    for fmt in ("mp3", "aac"):
        resp = _post(api, response_format=fmt, stream=True, **SMALL)
        assert decode_progressively(fmt, [resp.content]).samples >= SMALL["max_frames"] * 3840


# ---- OpenAI's pcm for its model names, sample_rate ----------------------------------------------


@pytest.fixture(scope="module")
def float_pcm(api: httpx.Client, served) -> np.ndarray:
    """The same speech as `buffered_pcm`, unclipped float32 [2, n]: what the player's route kept of it."""
    resp = api.post("/api/tts/stream", json={"text": TEXT, **SMALL})
    assert resp.status_code == 200, resp.text
    return served[1].state.results.get(resp.headers["x-request-id"])


@pytest.mark.parametrize("model", ["tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-03-20"])
def test_openai_model_names_get_24k_mono_pcm(sdk: openai.OpenAI, float_pcm: np.ndarray, model: str,
                                            default_voice: str) -> None:
    result = sdk.audio.speech.create(model=model, voice=default_voice, input=TEXT, response_format="pcm", extra_body=SMALL)
    headers = result.response.headers
    assert headers["x-sample-rate"] == "24000" and headers["x-channels"] == "1" and headers["x-sample-format"] == "s16le"
    mono = np.frombuffer(result.content, "<i2").astype(np.int32)
    # The engine's 48 kHz stereo, averaged to mono, resampled to 24 kHz, then made 16-bit.
    expected = soxr.resample(float_pcm.mean(axis=0), SR, 24_000, quality="HQ")
    expected = np.round(np.clip(expected, -1, 1) * 32767).astype(np.int32)
    assert mono.shape == expected.shape == (float_pcm.shape[1] // 2,)
    assert np.abs(mono - expected).max() <= 2


def test_native_model_keeps_48k_stereo_and_sample_rate_overrides(api: httpx.Client, buffered_pcm: np.ndarray) -> None:
    native = _post(api, response_format="pcm", **SMALL)
    assert native.headers["x-sample-rate"] == "48000" and native.headers["x-channels"] == "2"
    wav = _post(api, model="tts-1", response_format="wav", **SMALL)  # self-describing formats stay native
    assert wav.headers["x-sample-rate"] == "48000" and wav.content[22:24] == b"\x02\x00"
    low = _post(api, model="tts-1", response_format="pcm", sample_rate=16_000, **SMALL)
    assert low.headers["x-sample-rate"] == "16000" and low.headers["x-channels"] == "1"
    assert len(low.content) // 2 == buffered_pcm.shape[0] // 3
    stereo_low = _post(api, response_format="pcm", sample_rate=24_000, **SMALL)
    assert stereo_low.headers["x-channels"] == "2" and len(stereo_low.content) // 4 == buffered_pcm.shape[0] // 2
    sse = api.post("/v1/audio/speech", json={"model": "tts-1", "input": TEXT, "stream_format": "sse", **SMALL})
    assert sse.headers["x-sample-rate"] == "24000" and sse.headers["x-channels"] == "1"
    alias_pcm = _s16(_post(api, model="tts-1", response_format="pcm", **SMALL).content, 1)
    _same(_s16(sse_audio(parse_sse(sse.text.splitlines())), 1), alias_pcm)


# ---- speed --------------------------------------------------------------------------------------


@pytest.mark.parametrize("speed", [0.5, 1.25, 2.0, 4.0])
def test_speed_streamed_and_buffered_agree(api: httpx.Client, buffered_pcm: np.ndarray, speed: float) -> None:
    whole = _post(api, response_format="pcm", speed=speed, **SMALL)
    assert whole.headers["x-speed"] == f"{speed:g}"
    pcm = _s16(whole.content)
    assert pcm.shape[0] == round(buffered_pcm.shape[0] / speed)
    sse = api.post("/v1/audio/speech", json={"input": TEXT, "stream_format": "sse", "speed": speed, **SMALL})
    # Same codes, same audio: the streamed stretch gives what the whole one does.
    _same(_s16(sse_audio(parse_sse(sse.text.splitlines()))), pcm)


def test_speed_out_of_range_is_refused_by_the_sdk(sdk: openai.OpenAI) -> None:
    for speed in (0.1, 4.01):
        with pytest.raises(openai.BadRequestError) as bad:
            sdk.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, speed=speed)
        assert bad.value.body["param"] == "speed" and "0.25" in bad.value.body["message"]


def test_instructions_are_accepted_and_ignored(api: httpx.Client, buffered_pcm: np.ndarray) -> None:
    told = _post(api, response_format="pcm", instructions="Speak like a pirate, slowly.", **SMALL)
    _same(_s16(told.content), buffered_pcm)


# ---- captions -----------------------------------------------------------------------------------


def _captioned(api: httpx.Client, speed: float = 1.0) -> tuple[list[dict], float, dict]:
    resp = api.post("/v1/audio/speech", json={"input": CAPTIONED, "stream_format": "sse", "timestamps": True,
                                              "speed": speed, "seed": 11})
    assert resp.status_code == 200, resp.text
    events = parse_sse(resp.text.splitlines())
    audio_s = len(sse_audio(events)) / 4 / SR
    return events, audio_s, dict(resp.headers)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def test_captions_cover_the_input_in_order(api: httpx.Client) -> None:
    events, audio_s, headers = _captioned(api)
    segments = [e for e in events if e["type"] == "speech.segment"]
    assert len(segments) >= 2
    assert [s["index"] for s in segments] == list(range(len(segments)))
    assert _words(" ".join(s["text"] for s in segments)) == _words(CAPTIONED)
    assert segments[0]["start"] == 0
    for a, b in itertools.pairwise(segments):
        assert a["start"] <= a["end"] <= b["start"]  # in order, pauses between
    assert abs(segments[-1]["end"] - audio_s) < 0.01
    assert events[-1]["type"] == "speech.audio.done"
    _assert_captions_follow_their_audio(events)
    assert float(headers["x-estimated-duration"]) > 0


def _assert_captions_follow_their_audio(events: list[dict]) -> None:
    """Each caption comes once its audio has gone out: after the delta that holds its end."""
    sent_s = 0.0
    for event in events:
        if event["type"] == "speech.audio.delta":
            sent_s += len(base64.b64decode(event["audio"])) / 4 / SR
        elif event["type"] == "speech.segment":
            assert event["end"] <= sent_s + 0.001, (event, sent_s)


def test_captions_follow_the_speed(api: httpx.Client) -> None:
    normal, normal_s, normal_headers = _captioned(api)
    fast, fast_s, fast_headers = _captioned(api, speed=2.0)
    _assert_captions_follow_their_audio(fast)
    assert abs(fast_s - normal_s / 2) < 0.01
    assert abs(float(fast_headers["x-estimated-duration"]) - float(normal_headers["x-estimated-duration"]) / 2) < 0.02
    pairs = zip([e for e in normal if e["type"] == "speech.segment"], [e for e in fast if e["type"] == "speech.segment"])
    for a, b in pairs:
        assert a["text"] == b["text"]
        assert abs(b["start"] - a["start"] / 2) <= 0.002 and abs(b["end"] - a["end"] / 2) <= 0.002


@pytest.mark.parametrize("fmt", ["pcm", "mp3", "wav"])
def test_the_body_streams_without_being_asked_to(api: httpx.Client, fmt: str) -> None:
    """Agents (Pipecat's OpenAI client) send no `stream`: the first bytes still come while the engine
    generates, so a client that reads them and leaves cancels a stream still running."""
    def cancelled() -> float:
        text = api.get("/metrics").text
        match = re.search(r'^tts_streams_total\{outcome="cancelled"\} (\S+)$', text, re.M)
        return float(match.group(1)) if match else 0.0

    before = cancelled()
    body = {"model": "tts-1", "voice": "alloy", "input": "A long answer that keeps going for a while.",
            "response_format": fmt, "seed": 3, "max_frames": 375}
    with api.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200 and "content-length" not in response.headers
        first = next(response.iter_raw())
        assert first
    for _ in range(200):  # the server sees the client gone and cancels the stream (not a timing assert:
        if cancelled() > before:  # the loop only bounds how long the test waits for that event)
            break
        time.sleep(0.05)
    assert cancelled() == before + 1
