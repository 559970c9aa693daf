"""Request limits of the real app (text, body size, Gradio's upload size), the malformed-audio
corpus, local files never read through `ref_audio`, and the settings' own checks. Runs against
`inproc` (create_app under uvicorn in this process, small limits); bounded in count and time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.reliability_common import (
    INPROC_MAX_REF_S,
    INPROC_MAX_TEXT,
    INPROC_MAX_UPLOAD,
    assert_clean,
    b64,
    error_of,
    port_of,
    wav_bytes,
)

from bench.lib.reliability_clients import raw_http
from studio.settings import ServerSettings

pytestmark = pytest.mark.slow

def test_text_limits_on_both_routes(inproc_client) -> None:
    long_text = "a" * (INPROC_MAX_TEXT + 1)
    r = inproc_client.post("/v1/audio/speech", json={"input": long_text})
    assert r.status_code == 400 and error_of(r)["param"] == "input"
    r = inproc_client.post("/api/tts/stream", json={"text": long_text})
    assert r.status_code == 400 and error_of(r)["param"] == "text"
    r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": "AAAA", "ref_text": long_text})
    assert r.status_code == 400 and error_of(r)["param"] == "ref_text"


def test_lone_surrogates_are_not_server_errors(inproc_client, clip_wav) -> None:
    """JSON "\\ud800" decodes to a lone surrogate, which UTF-8 cannot carry (found by test_fuzz.py:
    it used to reach SentencePiece from ref_text and answer 500)."""
    clip = b64(clip_wav)
    cases = [("/v1/audio/speech", {"input": "Hello.", "ref_audio": clip, "ref_text": "\ud800abc"}),
             ("/api/tts/stream", {"text": "Hello.", "ref_audio": clip, "ref_text": "\udfffabc"}),
             ("/v1/audio/speech", {"input": "Hello \ud800 world."}), ("/api/tts/stream", {"text": "\ud800\udc00 hi"})]
    for route, body in cases:
        raw = json.dumps({**body, "max_frames": 2})  # ASCII JSON with \uXXXX escapes
        r = inproc_client.post(route, content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code in (200, 400), (route, body, r.status_code, r.text[:200])


def test_content_length_over_limit_is_refused_before_reading(inproc) -> None:
    """The declared size alone earns a 413: the server answers without waiting for the body (one
    byte of it is sent; a server waiting for the rest would answer 408 at its idle deadline)."""
    limit = inproc.settings.body_limit_bytes
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {limit + 1}\r\n\r\n")
    status, reply = raw_http(port_of(inproc), head, [b"{"])
    assert status == 413
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_too_large"


def test_chunked_body_is_counted_while_read(inproc) -> None:
    """No Content-Length: the body is counted as it arrives and refused once past the limit,
    without the client ever finishing it (no terminating chunk is sent)."""
    limit = inproc.settings.body_limit_bytes
    head = ("POST /api/tts/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n")
    block = b"x" * 65536
    parts = [b"%x\r\n%s\r\n" % (len(block), block)] * (limit // len(block) + 2)
    status, reply = raw_http(port_of(inproc), head, parts)
    assert status == 413
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_too_large"


def test_gradio_upload_limit(inproc_client) -> None:
    """Gradio's own upload route refuses files over max_upload_bytes (our body cap is above it)."""
    files = {"files": ("big.wav", b"\0" * (INPROC_MAX_UPLOAD + 1024), "audio/wav")}
    r = inproc_client.post("/gradio_api/upload", files=files)
    assert r.status_code == 413, r.text[:300]


# ---- malformed audio ---------------------------------------------------------------------


def _corpus(clip_wav: bytes) -> list[tuple[str, str, int, str]]:
    """(name, ref_audio value, expected status, expected code)."""
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(24_000) * 0.1).astype(np.float32)
    flac_10_min = wav_bytes(np.zeros(16_000 * 600, np.float32), 16_000, fmt="FLAC")
    # The same 10 minutes, but the FLAC header claims 1 s: only counting while decoding catches it.
    lying = bytearray(flac_10_min)
    fields = int.from_bytes(lying[18:26], "big")
    lying[18:26] = ((fields & ~((1 << 36) - 1)) | 16_000).to_bytes(8, "big")
    unknown = bytearray(flac_10_min)
    unknown[18:26] = (fields & ~((1 << 36) - 1)).to_bytes(8, "big")  # 0 = "length unknown"
    nan_wav = wav_bytes(np.full(24_000, np.nan, np.float32), 24_000, subtype="FLOAT")
    corpus = [
        ("empty", "", 400, "empty_audio"),
        ("empty data URL", "data:audio/wav;base64,", 400, "empty_audio"),
        ("truncated header", b64(clip_wav[:30]), 400, "invalid_audio"),
        ("truncated data", b64(clip_wav[:2000]), 400, "audio_too_short"),
        ("truncated flac", b64(wav_bytes(noise, 24_000, fmt="FLAC")[:900]), 400, "invalid_audio"),
        ("wrong magic", b64(b"XXXX" + clip_wav[4:]), 400, "invalid_audio"),
        ("1 sample", b64(wav_bytes(noise[:1], 24_000)), 400, "audio_too_short"),
        ("8 channels", b64(wav_bytes(np.tile(noise[:8000, None], (1, 8)), 16_000)), 400, "too_many_channels"),
        ("8 kHz", b64(wav_bytes(noise[:8000], 8000)), 400, "bad_sample_rate"),
        ("10 minutes (flac, 28 KiB)", b64(flac_10_min), 413, "ref_audio_too_long"),
        # libsndfile stops at the declared length: only 1 s (of silence) is ever decoded.
        ("10 minutes, header says 1 s", b64(bytes(lying)), 400, "silent_audio"),
        ("10 minutes, length unknown", b64(bytes(unknown)), 413, "ref_audio_too_long"),
        ("10 minutes (wav, 18 MiB)", b64(wav_bytes(np.zeros(16_000 * 600, np.float32), 16_000)), 413,
         "request_too_large"),
        ("over max_upload_bytes", b64(b"RIFF" + b"\0" * INPROC_MAX_UPLOAD), 413, "ref_audio_too_large"),
        ("random bytes", b64(rng.bytes(4096)), 400, "invalid_audio"),
        ("png", b64(b"\x89PNG\r\n\x1a\n" + rng.bytes(512)), 400, "invalid_audio"),
        ("text", b64(b"hello, this is not audio at all\n" * 20), 400, "invalid_audio"),
        ("mp3 magic + junk", b64(b"ID3" + rng.bytes(2048)), 400, "invalid_audio"),
        ("ogg magic + junk", b64(b"OggS" + rng.bytes(2048)), 400, "invalid_audio"),
        ("NaN samples", b64(nan_wav), 400, None),
        ("silence", b64(wav_bytes(np.zeros(24_000, np.float32), 24_000)), 400, "silent_audio"),
        ("not base64", "%%%% not base64 %%%%", 400, "invalid_base64"),
        ("data URL without comma", "data:audio/wav;base64", 400, "invalid_data_url"),
    ]
    return corpus


@pytest.mark.timeout(120)
def test_malformed_audio_corpus(inproc, inproc_client, clip_wav, data_dir, figures) -> None:
    """Every malformed clip gets a clear 4xx naming ref_audio on both routes; the server keeps serving."""
    answered = 0
    for name, value, status, code in _corpus(clip_wav):
        for route, body in (("/v1/audio/speech", {"input": "Hi.", "max_frames": 2, "ref_audio": value}),
                            ("/api/tts/stream", {"text": "Hi.", "max_frames": 2, "ref_audio": value})):
            r = inproc_client.post(route, json=body)
            assert r.status_code == status, (name, route, r.status_code, r.text[:300])
            error = error_of(r)
            if code is not None:
                assert error["code"] == code, (name, route, error)
            if code != "request_too_large":
                assert error["param"] == "ref_audio", (name, route, error)
            assert_clean(r.text, data_dir)
            answered += 1
    ok = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "max_frames": 2, "response_format": "wav",
                                                       "ref_audio": b64(clip_wav)})
    assert ok.status_code == 200 and ok.content[:4] == b"RIFF"
    assert inproc_client.get("/health").json()["status"] == "ready"
    figures["malformed_audio"] = {"cases": answered // 2, "requests": answered, "all_4xx": True}

def test_ref_audio_never_reads_local_files(inproc_client, data_dir) -> None:
    real_clip = str(data_dir / "presets" / "en_2.wav")
    values = [real_clip, "/etc/passwd", "file:///etc/passwd", "FILE:" + real_clip, "~/.ssh/id_rsa",
              "../../../../etc/passwd", "..\\..\\win.ini", "C:\\Windows\\win.ini", "\\\\server\\share\\a.wav",
              "  " + real_clip, "./app.py"]
    for value in values:
        for route, body in (("/v1/audio/speech", {"input": "Hi.", "ref_audio": value}),
                            ("/api/tts/stream", {"text": "Hi.", "ref_audio": value})):
            r = inproc_client.post(route, json=body)
            assert r.status_code == 400, (value, route, r.status_code)
            assert error_of(r)["code"] == "local_path_refused", (value, r.text)



def test_settings_are_checked() -> None:
    settings = ServerSettings(max_upload_bytes=3 * 2**20, max_text_chars=100)
    assert settings.body_limit_bytes == 4 * 2**20 + 1200 + 65536
    assert settings.inflight_body_limit_bytes == 4 * settings.body_limit_bytes
    assert ServerSettings(remote_audio_allow_hosts=[" 127.0.0.1:1 "]).remote_audio_allow_hosts == ("127.0.0.1:1",)
    for bad in ({"max_upload_bytes": 0}, {"max_ref_audio_s": 0}, {"max_connections": True},
                {"remote_audio_allow_hosts": "127.0.0.1"}, {"body_idle_s": 0}, {"port": 70000},
                {"fd_reserve": -1}):
        with pytest.raises(ValueError):
            ServerSettings(**bad)
    assert INPROC_MAX_REF_S < 600  # the corpus' 10-minute clips must exceed the limit
