"""The result store and GET /api/tts/result/{id}.{fmt}: bounded by bytes and age, 16-bit files, safe names."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile
from fastapi import FastAPI
from fastapi.testclient import TestClient

from studio.delivery.results import ResultStore, build_results_router, download_name
from studio.delivery.speech_output import OutputSpec
from studio.delivery.transports import TRANSPORTS, player_writer
from tts_core.audio.stretch import Stretcher
from tts_core.types import AudioChunk, Timings


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tone(seconds: float, seed: int = 0) -> np.ndarray:
    n = int(48_000 * seconds)
    t = np.arange(n) / 48_000
    rng = np.random.default_rng(seed)
    left = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.01 * rng.standard_normal(n)
    return np.stack([left, -0.5 * left]).astype(np.float32)


def test_store_joins_parts_and_evicts_the_least_recently_used_by_bytes():
    a, b, c = tone(0.5, 1), tone(0.5, 2), tone(0.5, 3)
    store = ResultStore(max_bytes=2 * a.nbytes + 10)
    store.add("aaaa0000", a[:, :1000])
    store.add("aaaa0000", a[:, 1000:])
    store.add("bbbb0000", b)
    np.testing.assert_array_equal(store.get("aaaa0000"), a)  # also makes "aaaa0000" the most recent
    store.add("cccc0000", c)  # over the limit: the least recently used ("bbbb0000") goes
    assert store.get("bbbb0000") is None
    np.testing.assert_array_equal(store.get("cccc0000"), c)
    assert len(store) == 2 and store.num_bytes == a.nbytes + c.nbytes


def test_store_forgets_results_older_than_its_age_limit():
    clock = FakeClock()
    store = ResultStore(max_age_s=60, clock=clock)
    store.add("aaaa0000", tone(0.1))
    clock.now = 59
    assert store.get("aaaa0000") is not None
    clock.now = 61
    assert store.get("aaaa0000") is None and len(store) == 0 and store.num_bytes == 0


def chunks_of(pcm: np.ndarray, parts: int = 3) -> list[AudioChunk]:
    pieces = np.array_split(pcm, parts, axis=1)
    return [AudioChunk(seq=i, pcm=p, codes=np.zeros((0, 16), np.int64), is_last=i == len(pieces) - 1,
                       timings=Timings(0.0, 0.0, 0.0)) for i, p in enumerate(pieces)]


@pytest.mark.parametrize("transport", ["opus", "s16"])
def test_the_stream_writer_keeps_the_float32_it_encodes(transport):
    """Whatever the wire carries, the store keeps the render's float32 (after the time-stretch),
    through `SpeechRender`'s tap: a download is the source, never the Opus."""
    store = ResultStore()
    pcm = tone(0.5)
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(results=store)))
    writer = player_writer(TRANSPORTS[transport], OutputSpec(TRANSPORTS[transport].fmt, speed=1.5),
                           request_id="feed0001", http_request=request)
    sent = b"".join(writer(chunk) for chunk in chunks_of(pcm)) + writer.finish()
    writer.close()
    assert sent.endswith(b'"request_id":"feed0001"}')  # the last frame: speech.done
    stretcher = Stretcher(1.5)  # the same stretch, fed the same chunks
    expected = np.concatenate([stretcher.push(c.pcm) for c in chunks_of(pcm)] + [stretcher.flush()], axis=1)
    np.testing.assert_array_equal(store.get("feed0001"), expected)
    no_store = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace()))
    player_writer(TRANSPORTS[transport], OutputSpec("pcm"), request_id="x", http_request=no_store).close()  # no store


@pytest.mark.parametrize(("name", "expected"), [
    ("Nova – Hello there, world!", "Nova Hello there, world.mp3"),
    ("../../etc/passwd", "etc passwd.mp3"),
    ("今天天气很好", "今天天气很好.mp3"),
    ("", "moss-tts-abcd1234.mp3"),
    ('a"b<c>d\r\ne', "a b c d e.mp3"),
    ("x" * 200, "x" * 80 + ".mp3"),
])
def test_download_names_are_readable_and_safe(name, expected):
    assert download_name(name, "abcd1234", "mp3") == expected


@pytest.fixture
def client_and_store():
    store = ResultStore()
    app = FastAPI()
    app.include_router(build_results_router(store))
    with TestClient(app) as client:
        yield client, store


def test_downloads_are_16_bit_wav_and_flac_and_a_small_mp3(client_and_store):
    client, store = client_and_store
    pcm = tone(2.0)
    store.add("0123456789abcdef", pcm)
    expected = np.round(np.clip(pcm, -1, 1) * 32767).astype(np.int16).T
    sizes = {}
    for fmt in ("wav", "flac"):
        response = client.get(f"/api/tts/result/0123456789abcdef.{fmt}", params={"name": "Nova - Hello world"})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == f"audio/{fmt}"
        assert 'filename="Nova - Hello world.' + fmt + '"' in response.headers["content-disposition"]
        audio, rate = soundfile.read(io.BytesIO(response.content), dtype="int16", always_2d=True)
        info = soundfile.info(io.BytesIO(response.content))
        assert rate == 48_000 and info.subtype == "PCM_16" and info.channels == 2
        np.testing.assert_array_equal(audio, expected)  # exactly the sent audio, rounded to 16 bits
        sizes[fmt] = len(response.content)
    mp3 = client.get("/api/tts/result/0123456789abcdef.mp3")
    assert mp3.status_code == 200 and mp3.headers["content-type"] == "audio/mpeg"
    assert "moss-tts-0123456789abcdef.mp3" in mp3.headers["content-disposition"]
    decoded, rate = soundfile.read(io.BytesIO(mp3.content), dtype="float32", always_2d=True)
    assert rate == 48_000 and decoded.shape[1] == 2 and abs(len(decoded) - pcm.shape[1]) < 48_000 * 0.1
    assert len(mp3.content) * 4 < sizes["wav"]  # "MP3 (small)"


def test_unicode_names_reach_the_browser_through_rfc5987(client_and_store):
    client, store = client_and_store
    store.add("0123456789abcdef", tone(0.1))
    response = client.get("/api/tts/result/0123456789abcdef.wav", params={"name": "Cedar 今天"})
    disposition = response.headers["content-disposition"]
    assert "filename*=UTF-8''Cedar%20%E4%BB%8A%E5%A4%A9.wav" in disposition


@pytest.mark.parametrize("path", ["/api/tts/result/ffffffffffffffff.mp3", "/api/tts/result/not-an-id.mp3",
                                  "/api/tts/result/0123456789abcdef.ogg"])
def test_unknown_expired_or_unsupported_results_are_a_clear_404(client_and_store, path):
    client, store = client_and_store
    store.add("0123456789abcdef", tone(0.1))
    response = client.get(path)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "result_not_found" and error["param"] in ("request_id", "format")
    assert "generate it again" in error["message"] or "mp3, flac, wav" in error["message"]
