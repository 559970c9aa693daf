"""Reliability and security of the real app: load, disconnects, soak, limits, malformed audio, SSRF,
paths, CORS. Everything talks to 127.0.0.1 only; every loop is bounded in count and in time.

Servers (see reliability_helpers): `app_proc` is `python app.py` with the tiny checkpoints (4 streams,
queue 12), measured from outside with psutil; `inproc` is `create_app` under uvicorn in this process
with small limits and remote ref_audio allowed for one local file server only. The figures go to
test-artifacts/reliability.json; docs/RELIABILITY.md quotes the last full run.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from reliability_common import (
    INPROC_MAX_REF_S,
    INPROC_MAX_TEXT,
    INPROC_MAX_UPLOAD,
    PROC_MAX_ACTIVE,
    PROC_MAX_QUEUE,
    REPO_ROOT,
    SAMPLES_PER_FRAME,
    run_coro,
    wav_bytes,
)

from tts_core.errors import InvalidRequestError, ModelLoadError
from tts_core.web import netguard
from tts_core.web.errors import install_error_handlers, sanitize_health, scrub_paths
from tts_core.web.guards import BodyLimitMiddleware, install_http_guards
from tts_core.web.settings import ServerSettings

pytest_plugins = ["reliability_helpers"]
pytestmark = pytest.mark.slow

LONG_TEXT = " ".join(f"This is sentence number {i}, and it keeps the stream busy for a while." for i in range(6))
FORBIDDEN_IN_RESPONSES = ("Traceback", 'File "', "site-packages", "/work/", str(REPO_ROOT))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _assert_clean(text: str, data_dir: Path) -> None:
    """No stack trace and no internal path in a response body."""
    for needle in (*FORBIDDEN_IN_RESPONSES, str(data_dir), "tiny_lm", "tiny_codec"):
        assert needle not in text, f"{needle!r} leaked in: {text[:500]}"


def _error(response: httpx.Response) -> dict:
    """The OpenAI error object of a 4xx/5xx response (asserting its shape)."""
    assert response.headers.get("content-type", "").startswith("application/json"), response.text[:200]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], error
    return error


def _port(inproc) -> int:
    return int(inproc.url.rsplit(":", 1)[1])


def _raw_http(port: int, head: str, body_parts: list[bytes] = (), *, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """Send a hand-made request on a socket (so nothing is normalised) and return (status, raw reply)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        try:
            sock.sendall(head.encode("latin-1"))
            for part in body_parts:
                sock.sendall(part)
        except OSError:  # the server may answer and close before the body is sent: that is the point
            pass
        reply = b""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                block = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not block:
                break
            reply += block
            if b"\r\n\r\n" in reply:
                header, _, rest = reply.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in header.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(rest) >= length:
                    break
    assert reply.startswith(b"HTTP/1.1 "), reply[:200]
    return int(reply[9:12]), reply


# ======================================================================================
# load, disconnect storm, soak: python app.py
# ======================================================================================


def _stream_body(index: int, *, max_frames: int | None, text: str | None = None) -> tuple[str, dict, int]:
    """(route, JSON body, bytes per stereo sample) alternating the two streaming routes."""
    text = text or f"Load test number {index}, please stand by."
    extra = {"max_frames": max_frames} if max_frames else {}
    if index % 2:
        return "/api/tts/stream", {"text": text, "seed": index, **extra}, 8  # float32 stereo
    return "/v1/audio/speech", {"input": text, "response_format": "pcm", "stream": True, "seed": index, **extra}, 4


async def _load_client(client: httpx.AsyncClient, index: int) -> tuple[str, str]:
    route, body, sample_bytes = _stream_body(index, max_frames=6)
    try:
        async with client.stream("POST", route, json=body) as response:
            data = b"".join([chunk async for chunk in response.aiter_raw()])
    except httpx.HTTPError as exc:
        return "broken", f"{index}: {type(exc).__name__} {exc}"
    if response.status_code == 200:
        frames = len(data) / (sample_bytes * SAMPLES_PER_FRAME)
        ok = len(data) > 0 and len(data) % (2 * sample_bytes) == 0 and frames <= 6
        return ("served", "") if ok else ("broken", f"{index}: 200 with {len(data)} bytes")
    if response.status_code == 503:
        error = json.loads(data)["error"]
        retry = response.headers.get("retry-after", "")
        if error["code"] == "queue_full" and retry.isdigit() and int(retry) >= 1:
            return "refused", ""
    return "broken", f"{index}: HTTP {response.status_code} {data[:200]!r}"


@pytest.mark.timeout(240)
def test_load_32_concurrent_streams(app_proc, figures) -> None:
    """32 clients at once on 4 slots + 12 queue places: each is served in full or refused with
    503 + Retry-After; afterwards the engine is idle and the server still answers."""
    app_proc.wait_idle()
    before = app_proc.health()

    async def run() -> list[tuple[str, str]]:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=app_proc.url, timeout=120, limits=limits) as client:
            return await asyncio.wait_for(asyncio.gather(*(_load_client(client, i) for i in range(32))), 200)

    started = time.monotonic()
    results = run_coro(run())
    seconds = time.monotonic() - started
    outcomes = [kind for kind, _ in results]
    assert outcomes.count("broken") == 0, [why for kind, why in results if kind == "broken"]
    served, refused = outcomes.count("served"), outcomes.count("refused")
    assert served >= PROC_MAX_ACTIVE + PROC_MAX_QUEUE or refused == 0, (served, refused)
    health = app_proc.wait_idle()
    assert health["status"] == "ready"
    assert health["refused"] - before["refused"] == refused
    follow_up = httpx.post(app_proc.url + "/api/tts/stream", json={"text": "Still here?", "max_frames": 2}, timeout=60)
    assert follow_up.status_code == 200 and follow_up.content
    figures["load"] = {"clients": 32, "served": served, "refused_503": refused, "broken": 0,
                       "slots": PROC_MAX_ACTIVE, "queue": PROC_MAX_QUEUE, "seconds": round(seconds, 1)}


async def _abort_client(client: httpx.AsyncClient, index: int) -> str:
    """Start a long stream, read the first audio, then drop the connection."""
    route, body, sample_bytes = _stream_body(index, max_frames=None, text=LONG_TEXT)
    async with client.stream("POST", route, json=body) as response:
        if response.status_code != 200:
            return f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
        received = 0
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if received >= sample_bytes * 2:  # audio is flowing: leave mid-stream
                return "aborted"
    return "finished"  # the whole stream arrived before we left (a very short babble)


@pytest.mark.timeout(240)
def test_disconnect_storm_frees_everything(app_proc, figures) -> None:
    """50 clients leave mid-stream (waves of 10, within slots + queue): every slot is freed and
    no thread, file descriptor or temporary file is left behind."""
    base = app_proc.baseline()
    health_before = app_proc.health()

    async def run() -> list[str]:
        results: list[str] = []
        limits = httpx.Limits(max_connections=16, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=app_proc.url, timeout=60, limits=limits) as client:
            for wave in range(5):
                results += await asyncio.wait_for(
                    asyncio.gather(*(_abort_client(client, 10 * wave + i) for i in range(10))), 60)
        return results

    started = time.monotonic()
    results = run_coro(run())
    seconds = time.monotonic() - started
    peak = app_proc.snapshot()
    assert all(r in ("aborted", "finished") for r in results), results
    aborted = results.count("aborted")
    assert aborted >= 45, results
    health = app_proc.wait_idle(timeout_s=20)
    cancelled = health["cancelled"] - health_before["cancelled"]
    finished = health["finished"] - health_before["finished"]
    assert health["active_streams"] == 0 and health["queued"] == 0
    assert cancelled + finished == 50 and cancelled >= aborted, (cancelled, finished, aborted)
    after = app_proc.pruned_snapshot()
    figures["disconnect_storm"] = {
        "clients": 50, "aborted_mid_stream": aborted, "finished_before_abort": 50 - aborted,
        "engine_cancelled": cancelled, "engine_finished": finished, "seconds": round(seconds, 1),
        "threads_idle_before": base["threads"], "threads_right_after": peak["threads"],
        "threads_idle_after": after["threads"], "fds_idle_before": base["fds"], "fds_after": after["fds"],
        "tmp_files_before": base["tmp_files"], "tmp_files_after": after["tmp_files"],
        "rss_mib_before": base["rss_mib"], "rss_mib_after": after["rss_mib"],
    }
    assert after["threads"] <= base["threads"] + 2, figures["disconnect_storm"]
    assert after["fds"] <= base["fds"] + 2, figures["disconnect_storm"]
    assert after["tmp_files"] == base["tmp_files"], figures["disconnect_storm"]
    assert httpx.post(app_proc.url + "/api/tts/stream", json={"text": "Hello.", "max_frames": 2},
                      timeout=60).status_code == 200


@pytest.mark.timeout(120)
def test_clients_leaving_while_queued(app_proc, figures) -> None:
    """Clients that give up while queued (before any byte of the response): the server only notices
    when their turn comes (known limit), then cancels them at once; nothing stays queued or active."""
    app_proc.wait_idle()
    before = app_proc.health()

    async def run() -> tuple[list[str], int]:
        release = asyncio.Event()
        limits = httpx.Limits(max_connections=16, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=app_proc.url, timeout=60, limits=limits) as client:

            async def holder(index: int) -> None:
                route, body, _ = _stream_body(index, max_frames=None, text=LONG_TEXT)
                async with client.stream("POST", route, json=body) as response:
                    async for _chunk in response.aiter_raw():
                        break
                    await release.wait()

            async def impatient(index: int) -> str:
                route, body, _ = _stream_body(index, max_frames=None, text=LONG_TEXT)
                try:
                    await asyncio.wait_for(client.post(route, json=body), 0.5)
                except asyncio.TimeoutError:
                    return "gave up"
                return "answered"

            holders = [asyncio.create_task(holder(i)) for i in range(PROC_MAX_ACTIVE)]
            deadline = time.monotonic() + 30
            while (await client.get("/health")).json()["active_streams"] < PROC_MAX_ACTIVE:
                assert time.monotonic() < deadline, "holders never got their slots"
                await asyncio.sleep(0.05)
            results = await asyncio.gather(*(impatient(100 + i) for i in range(6)))
            still_queued = (await client.get("/health")).json()["queued"]
            release.set()
            await asyncio.wait_for(asyncio.gather(*holders), 30)
            return results, still_queued

    results, still_queued = run_coro(run())
    assert results == ["gave up"] * 6
    health = app_proc.wait_idle(timeout_s=30)
    done = (health["cancelled"] + health["finished"]) - (before["cancelled"] + before["finished"])
    assert done == PROC_MAX_ACTIVE + 6, (before, health)
    figures["left_while_queued"] = {"clients": 6, "queued_after_they_left": still_queued,
                                    "engine_idle_afterwards": True}


def _soak_request(client: httpx.Client, index: int, clip_b64: str) -> httpx.Response:
    kind = index % 6
    text = f"Soak request {index}."
    speech = {"input": text, "seed": index, "max_frames": 2}
    if kind == 0:
        return client.post("/api/tts/stream", json={"text": text, "seed": index, "max_frames": 2})
    if kind == 1:
        return client.post("/v1/audio/speech", json={**speech, "response_format": "wav"})
    if kind == 2:
        return client.post("/v1/audio/speech", json={**speech, "response_format": "pcm", "stream": True})
    if kind == 3:
        return client.post("/v1/audio/speech", json={**speech, "voice": "no-such-voice"})  # 404
    if kind == 4:
        return client.post("/v1/audio/speech", json={**speech, "response_format": "mp3"})
    return client.post("/api/tts/stream", json={"text": text, "seed": index, "max_frames": 2, "ref_audio": clip_b64})


@pytest.mark.timeout(300)
def test_soak_300_sequential_requests(app_proc, clip_wav, figures) -> None:
    """300 mixed requests one after another (4 audio routes/formats, cloning, a 404): resident
    memory grows less than 10 % after a 30-request warm-up, threads and fds stay flat."""
    clip_b64 = _b64(clip_wav)
    counts = {"ok": 0, "client_error": 0, "refused": 0}
    with httpx.Client(base_url=app_proc.url, timeout=60) as client:
        for index in range(30):  # warm-up: every kind of request, caches and pools filled
            assert _soak_request(client, index, clip_b64).status_code in (200, 404)
        app_proc.wait_idle()
        before = app_proc.pruned_snapshot()
        started = time.monotonic()
        for index in range(30, 330):
            response = _soak_request(client, index, clip_b64)
            expected = 404 if index % 6 == 3 else 200
            assert response.status_code == expected, (index, response.status_code, response.text[:300])
            counts["ok" if expected == 200 else "client_error"] += 1
            assert time.monotonic() - started < 240, f"soak too slow: {index - 30} requests done"
        seconds = time.monotonic() - started
    app_proc.wait_idle()
    after = app_proc.pruned_snapshot()
    growth = (after["rss_mib"] - before["rss_mib"]) / before["rss_mib"]
    figures["soak"] = {
        "requests": 300, "served_200": counts["ok"], "answered_404": counts["client_error"],
        "refused_503": counts["refused"], "seconds": round(seconds, 1),
        "rss_mib_before": before["rss_mib"], "rss_mib_after": after["rss_mib"],
        "rss_growth_pct": round(100 * growth, 2), "threads_idle_before": before["threads"],
        "threads_idle_after": after["threads"], "fds_before": before["fds"], "fds_after": after["fds"],
    }
    assert growth < 0.10, figures["soak"]
    assert after["threads"] <= before["threads"] + 2 and after["fds"] <= before["fds"] + 2, figures["soak"]


# ======================================================================================
# limits
# ======================================================================================


def test_text_limits_on_both_routes(inproc_client) -> None:
    long_text = "a" * (INPROC_MAX_TEXT + 1)
    r = inproc_client.post("/v1/audio/speech", json={"input": long_text})
    assert r.status_code == 400 and _error(r)["param"] == "input"
    r = inproc_client.post("/api/tts/stream", json={"text": long_text})
    assert r.status_code == 400 and _error(r)["param"] == "text"
    r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": "AAAA", "ref_text": long_text})
    assert r.status_code == 400 and _error(r)["param"] == "ref_text"


def test_lone_surrogates_are_not_server_errors(inproc_client, clip_wav) -> None:
    """JSON "\\ud800" decodes to a lone surrogate, which UTF-8 cannot carry (found by test_fuzz.py:
    it used to reach SentencePiece from ref_text and answer 500)."""
    clip = _b64(clip_wav)
    cases = [("/v1/audio/speech", {"input": "Hello.", "ref_audio": clip, "ref_text": "\ud800abc"}),
             ("/api/tts/stream", {"text": "Hello.", "ref_audio": clip, "ref_text": "\udfffabc"}),
             ("/v1/audio/speech", {"input": "Hello \ud800 world."}), ("/api/tts/stream", {"text": "\ud800\udc00 hi"})]
    for route, body in cases:
        raw = json.dumps({**body, "max_frames": 2})  # ASCII JSON with \uXXXX escapes
        r = inproc_client.post(route, content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code in (200, 400), (route, body, r.status_code, r.text[:200])


def test_content_length_over_limit_is_refused_before_reading(inproc) -> None:
    """The declared size alone earns a 413: the server answers without waiting for the body."""
    limit = inproc.settings.body_limit_bytes
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {limit + 1}\r\n\r\n")
    started = time.monotonic()
    status, reply = _raw_http(_port(inproc), head, [b"{"])
    assert status == 413 and time.monotonic() - started < 5
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_too_large"


def test_chunked_body_is_counted_while_read(inproc) -> None:
    """No Content-Length: the body is counted as it arrives and refused once past the limit,
    without the client ever finishing it (no terminating chunk is sent)."""
    limit = inproc.settings.body_limit_bytes
    head = ("POST /api/tts/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n")
    block = b"x" * 65536
    parts = [b"%x\r\n%s\r\n" % (len(block), block)] * (limit // len(block) + 2)
    status, reply = _raw_http(_port(inproc), head, parts)
    assert status == 413
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_too_large"


def _guard(app) -> BodyLimitMiddleware:
    layer = app.middleware_stack
    while layer is not None and not isinstance(layer, BodyLimitMiddleware):
        layer = getattr(layer, "app", None)
    assert layer is not None, "BodyLimitMiddleware not installed"
    return layer


@pytest.mark.timeout(60)
def test_bodies_in_flight_are_bounded(inproc, inproc_client) -> None:
    """Slow uploads that together would hold more than the in-flight budget: the next one gets
    503 + Retry-After; once they go away the budget is whole again."""
    limit = inproc.settings.body_limit_bytes
    per_request = limit - 1
    holders = inproc.settings.inflight_body_limit_bytes // per_request
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {per_request}\r\n\r\n")
    sockets = []
    try:
        for _ in range(holders):
            sock = socket.create_connection(("127.0.0.1", _port(inproc)), timeout=10)
            sock.sendall(head.encode() + b'{"input": "')
            sockets.append(sock)
        deadline = time.monotonic() + 10
        while _guard(inproc.app).inflight_bytes < holders * per_request and time.monotonic() < deadline:
            time.sleep(0.05)
        status, reply = _raw_http(_port(inproc), head, [b"{}"])
        assert status == 503, reply[:300]
        assert b"retry-after: 2" in reply.lower()
    finally:
        for sock in sockets:
            sock.close()
    deadline = time.monotonic() + 10
    while _guard(inproc.app).inflight_bytes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _guard(inproc.app).inflight_bytes == 0
    assert inproc_client.get("/v1/models").status_code == 200


def test_gradio_upload_limit(inproc_client) -> None:
    """Gradio's own upload route refuses files over max_upload_bytes (our body cap is above it)."""
    files = {"files": ("big.wav", b"\0" * (INPROC_MAX_UPLOAD + 1024), "audio/wav")}
    r = inproc_client.post("/gradio_api/upload", files=files)
    assert r.status_code == 413, r.text[:300]


# ======================================================================================
# malformed audio corpus
# ======================================================================================


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
        ("truncated header", _b64(clip_wav[:30]), 400, "invalid_audio"),
        ("truncated data", _b64(clip_wav[:2000]), 400, "audio_too_short"),
        ("truncated flac", _b64(wav_bytes(noise, 24_000, fmt="FLAC")[:900]), 400, "invalid_audio"),
        ("wrong magic", _b64(b"XXXX" + clip_wav[4:]), 400, "invalid_audio"),
        ("1 sample", _b64(wav_bytes(noise[:1], 24_000)), 400, "audio_too_short"),
        ("8 channels", _b64(wav_bytes(np.tile(noise[:8000, None], (1, 8)), 16_000)), 400, "too_many_channels"),
        ("8 kHz", _b64(wav_bytes(noise[:8000], 8000)), 400, "bad_sample_rate"),
        ("10 minutes (flac, 28 KiB)", _b64(flac_10_min), 413, "ref_audio_too_long"),
        # libsndfile stops at the declared length: only 1 s (of silence) is ever decoded.
        ("10 minutes, header says 1 s", _b64(bytes(lying)), 400, "silent_audio"),
        ("10 minutes, length unknown", _b64(bytes(unknown)), 413, "ref_audio_too_long"),
        ("10 minutes (wav, 18 MiB)", _b64(wav_bytes(np.zeros(16_000 * 600, np.float32), 16_000)), 413,
         "request_too_large"),
        ("over max_upload_bytes", _b64(b"RIFF" + b"\0" * INPROC_MAX_UPLOAD), 413, "ref_audio_too_large"),
        ("random bytes", _b64(rng.bytes(4096)), 400, "invalid_audio"),
        ("png", _b64(b"\x89PNG\r\n\x1a\n" + rng.bytes(512)), 400, "invalid_audio"),
        ("text", _b64(b"hello, this is not audio at all\n" * 20), 400, "invalid_audio"),
        ("mp3 magic + junk", _b64(b"ID3" + rng.bytes(2048)), 400, "invalid_audio"),
        ("ogg magic + junk", _b64(b"OggS" + rng.bytes(2048)), 400, "invalid_audio"),
        ("NaN samples", _b64(nan_wav), 400, None),
        ("silence", _b64(wav_bytes(np.zeros(24_000, np.float32), 24_000)), 400, "silent_audio"),
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
            error = _error(r)
            if code is not None:
                assert error["code"] == code, (name, route, error)
            if code != "request_too_large":
                assert error["param"] == "ref_audio", (name, route, error)
            _assert_clean(r.text, data_dir)
            answered += 1
    ok = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "max_frames": 2, "response_format": "wav",
                                                       "ref_audio": _b64(clip_wav)})
    assert ok.status_code == 200 and ok.content[:4] == b"RIFF"
    assert inproc_client.get("/health").json()["status"] == "ready"
    figures["malformed_audio"] = {"cases": answered // 2, "requests": answered, "all_4xx": True}


# ======================================================================================
# security: files, SSRF, names, paths in responses, CORS
# ======================================================================================


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
            assert _error(r)["code"] == "local_path_refused", (value, r.text)


def test_remote_audio_off_by_default(app_proc) -> None:
    r = httpx.post(app_proc.url + "/v1/audio/speech",
                   json={"input": "Hi.", "ref_audio": "http://127.0.0.1:9/clip.wav"}, timeout=30)
    assert r.status_code == 400 and _error(r)["code"] == "remote_audio_disabled"


@pytest.mark.timeout(60)
def test_remote_audio_refuses_non_public_addresses(inproc, inproc_client, file_server) -> None:
    """Only the exact exempt host:port is fetched; loopback by another name or port, private,
    link-local, multicast and unspecified addresses are refused without a connection."""
    port = file_server.port
    refused = [
        f"http://localhost:{port}/clip.wav", f"http://LOCALHOST.:{port}/clip.wav", f"http://[::1]:{port}/clip.wav",
        f"http://2130706433:{port}/clip.wav", f"http://0x7f.0.0.1:{port}/clip.wav", f"http://127.1:{port}/clip.wav",
        f"http://127.0.0.2:{port}/clip.wav", f"http://[::ffff:127.0.0.1]:{port}/clip.wav",
        f"http://0.0.0.0:{port}/clip.wav", f"{inproc.url}/health",
        "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/a.wav", "http://172.16.0.1/a.wav",
        "http://192.168.1.1/a.wav", "http://100.64.0.1/a.wav", "http://[fe80::1]/a.wav", "http://[fc00::1]/a.wav",
        "http://224.0.0.1/a.wav", "http://[ff02::1]/a.wav", "http://[::]/a.wav",
        f"http://user:pw@127.0.0.1:{port}/clip.wav",
    ]
    hits = len(file_server.hits)
    for url in refused:
        started = time.monotonic()
        r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": url})
        assert r.status_code == 400, (url, r.status_code, r.text)
        assert _error(r)["code"] in ("remote_audio_refused", "ref_audio_fetch"), (url, r.text)
        assert time.monotonic() - started < 3, url
    for url in ("ftp://127.0.0.1/a.wav", "gopher://127.0.0.1:70/", "dict://127.0.0.1:11211/"):
        r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": url})
        assert r.status_code == 400 and _error(r)["code"] == "unsupported_url", url
    assert len(file_server.hits) == hits, file_server.hits[hits:]  # nothing reached the local server


@pytest.mark.timeout(90)
def test_remote_audio_exempt_host_limits(inproc_client, file_server) -> None:
    """The exempt local server: a clip is fetched and cloned; redirects are re-checked; size,
    time and status limits hold."""
    base = file_server.url
    r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": f"{base}/clip.wav",
                                                     "max_frames": 2, "response_format": "wav"})
    assert r.status_code == 200 and r.content[:4] == b"RIFF", r.text[:300]
    r = inproc_client.post("/api/tts/stream", json={"text": "Hi.", "ref_audio": f"{base}/redirect?to={base}/clip.wav",
                                                    "max_frames": 2})
    assert r.status_code == 200, r.text[:300]
    hits = len(file_server.hits)
    r = inproc_client.post("/v1/audio/speech", json={
        "input": "Hi.", "ref_audio": f"{base}/redirect?to=http://localhost:{file_server.port}/clip.wav"})
    assert r.status_code == 400 and _error(r)["code"] == "remote_audio_refused"
    assert file_server.hits[hits:] == [f"/redirect?to=http://localhost:{file_server.port}/clip.wav"]
    for path, status, code in (("/big", 413, "ref_audio_too_large"), ("/big-chunked", 413, "ref_audio_too_large"),
                               ("/missing", 400, "ref_audio_fetch")):
        r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": base + path})
        assert r.status_code == status and _error(r)["code"] == code, (path, r.text)
    started = time.monotonic()
    r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": f"{base}/slow"})
    assert r.status_code == 400 and _error(r)["code"] == "ref_audio_fetch" and "longer than" in r.text
    assert time.monotonic() - started < 10


def test_public_address_rules() -> None:
    import ipaddress

    refused = ["127.0.0.1", "127.255.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.0.1", "169.254.169.254",
               "100.64.0.1", "0.0.0.0", "224.0.0.251", "255.255.255.255", "::1", "::", "fe80::1", "fc00::1",
               "fd12:3456::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1",
               "2001:db8::1", "192.0.2.1", "198.18.0.1", "240.0.0.1"]
    allowed = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"]
    for text in refused:
        assert not netguard.is_public_address(ipaddress.ip_address(text)), text
    for text in allowed:
        assert netguard.is_public_address(ipaddress.ip_address(text)), text
    target = netguard.parse_url("http://127.0.0.1:8080/a.wav")
    assert netguard.is_exempt(target, ["127.0.0.1:8080"]) and netguard.is_exempt(target, ["127.0.0.1"])
    assert not netguard.is_exempt(target, ["127.0.0.1:8081"]) and not netguard.is_exempt(target, ["localhost:8080"])
    assert not netguard.is_exempt(netguard.parse_url("http://localhost:8080/"), ["127.0.0.1:8080"])
    for bad in ("http://u@example.com/", "http:///x", "http://example.com:99999/", "ftp://example.com/",
                "http://exa mple.com/", "http://example.com\\@evil/", "http://" + "a" * 3000):
        with pytest.raises(netguard.FetchRefused):
            netguard.parse_url(bad)


def test_voice_names_and_paths_never_escape(inproc, inproc_client, data_dir, tmp_path) -> None:
    from tts_core.voices import VoiceBank, load_catalog
    from tts_core.web.requests import UploadStore

    for name in ("../../../../etc/passwd", "Cedar/../../app", "..", "%2e%2e%2fapp.py", "C:\\x", "\x00"):
        for route, body in (("/v1/audio/speech", {"input": "Hi.", "voice": name}),
                            ("/api/tts/stream", {"text": "Hi.", "voice": name})):
            r = inproc_client.post(route, json=body)
            assert r.status_code in (400, 404), (name, route, r.status_code)
            _assert_clean(r.text, data_dir)
    for path in ("/api/voices/..%2F..%2Fapp.py/clip", "/api/voices/%2e%2e/clip", "/api/voices/Cedar%2F..%2Fx/clip"):
        r = inproc_client.get(path)
        assert r.status_code == 404, (path, r.status_code)
    secrets_markers = (b"root:x:0:0", b"MOSS-TTS-Nano Studio: `python app.py`")
    for path in ("/player/../app.py", "/player/%2e%2e/app.py", "/player/..%2fapp.py", "/player/..%5capp.py",
                 "/gradio_api/file=/etc/passwd", f"/gradio_api/file={REPO_ROOT}/app.py", "/file=/etc/passwd",
                 f"/gradio_api/file={data_dir}/presets/en_2.wav", "/static/../../app.py", "/assets/../../app.py"):
        status, reply = _raw_http(_port(inproc), f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert not any(marker in reply for marker in secrets_markers), path
        assert status in (400, 403, 404, 405), (path, status)
    # Cache keys and codec fingerprints are validated before a path is built from them.
    bank = VoiceBank(load_catalog(), voices_dir=None, cache_dir=tmp_path, encoder=None, codec_fingerprint="ok",
                     allow_download=False)
    for key in ("../../etc/passwd", "a" * 63, "/" + "a" * 63, "A" * 64, "a" * 64 + "/.."):
        with pytest.raises(ValueError):
            bank.code_cache.get(key)
    for fingerprint in ("..", "../x", "a/b", "", "."):
        with pytest.raises(ValueError):
            VoiceBank(load_catalog(), voices_dir=None, cache_dir=tmp_path, encoder=None,
                      codec_fingerprint=fingerprint, allow_download=False)
    with pytest.raises(InvalidRequestError):
        UploadStore().get("../../etc/passwd")
    assert list(tmp_path.iterdir()) == []


def test_no_paths_or_traces_in_responses(app_proc, inproc_client, data_dir) -> None:
    for path in ("/health", "/v1/models", "/v1/voices", "/api/voices", "/v1/models/nope", "/nope", "/openapi.json"):
        _assert_clean(httpx.get(app_proc.url + path, timeout=30).text, data_dir)
    health = httpx.get(app_proc.url + "/health", timeout=30).json()
    assert health["lm"] == "local checkpoint" and health["codec"] == "local checkpoint"
    bad_requests = [
        ("/v1/audio/speech", b"{not json"), ("/v1/audio/speech", b"[]"), ("/api/tts/stream", b'{"text": 5}'),
        ("/api/tts/stream", b'{"text": "hi", "mode": "other"}'), ("/v1/audio/speech", b'{"input": "x", "seed": -1}'),
        ("/v1/audio/speech", b'{"input": "x", "top_k": 1e30}'), ("/api/tts/stream", b'{"text": "x", "max_frames": 0}'),
    ]
    for route, body in bad_requests:
        r = inproc_client.post(route, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (route, body, r.status_code, r.text)
        _error(r)
        _assert_clean(r.text, data_dir)


def test_model_load_failure_reveals_no_path(data_dir) -> None:
    """A failed load's message names the path in the log, never in a response."""
    from tts_core.web.app import create_app
    from tts_core.web.service import SynthesizerService

    secret = str(data_dir / "private" / "models")

    def factory(report):
        raise ModelLoadError(f"could not load the model from --lm {secret} (OSError: {secret}/config.json missing)")

    service = SynthesizerService(factory)
    service.start(background=False)
    settings = ServerSettings(lm_id=secret, codec_id=secret)
    app = create_app(service, settings)

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return [await client.get("/health"), await client.get("/v1/voices"),
                    await client.post("/v1/audio/speech", json={"input": "Hi."}),
                    await client.post("/api/tts/stream", json={"text": "Hi."})]

    responses = run_coro(run())
    for r in responses:
        _assert_clean(r.text, data_dir)
    assert responses[0].json()["status"] == "failed" and "config.json" in responses[0].json()["error"]
    assert [r.status_code for r in responses[1:]] == [500, 500, 500]
    assert "the model failed to load" in _error(responses[1])["message"]


def test_unexpected_errors_are_generic() -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("secret at /srv/secret/key.pem")

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get("/boom")

    r = run_coro(run())
    assert r.status_code == 500 and "secret" not in r.text and "Traceback" not in r.text
    assert _error(r)["type"] == "server_error"


def test_scrub_paths() -> None:
    assert scrub_paths("--lm /srv/models/lm failed: '/srv/models/lm/config.json'") == "--lm lm failed: 'config.json'"
    assert scrub_paths("see GET /v1/voices and /api/voices") == "see GET /v1/voices and /api/voices"
    assert scrub_paths("https://huggingface.co/OpenMOSS-Team/MOSS-TTS-Nano") == (
        "https://huggingface.co/OpenMOSS-Team/MOSS-TTS-Nano")
    assert scrub_paths(r"C:\Users\me\lm.bin and ~/.cache/hf and file:///etc/shadow") == "lm.bin and hf and shadow"
    assert scrub_paths("pcm/wav, 3/4, a / b") == "pcm/wav, 3/4, a / b"
    health = sanitize_health({"lm": "/x/tiny_lm", "codec": "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano",
                              "error": "at /x/y/z", "stats": {"n": 1}})
    assert health == {"lm": "local checkpoint", "codec": "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano",
                      "error": "at z", "stats": {"n": 1}}


def test_same_origin_by_default(inproc, inproc_client) -> None:
    """No Access-Control-Allow-Origin for another site, on our routes and on Gradio's, even when
    the server is reached under a public name (where Gradio alone would reflect any Origin)."""
    evil = {"Origin": "https://evil.example"}
    for path in ("/v1/models", "/health", "/api/voices", "/config", "/gradio_api/info"):
        for host in ("127.0.0.1", "tts.example.org"):
            r = inproc_client.get(path, headers={**evil, "Host": host})
            assert "access-control-allow-origin" not in r.headers, (path, host, dict(r.headers))
    preflight = {**evil, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    for path in ("/v1/audio/speech", "/api/tts/stream", "/gradio_api/queue/join"):
        r = inproc_client.options(path, headers={**preflight, "Host": "tts.example.org"})
        assert "access-control-allow-origin" not in r.headers and r.status_code >= 400, (path, r.status_code)
    # A page on another site can still send a "simple" text/plain POST; it is refused, not synthesised.
    r = inproc_client.post("/v1/audio/speech", content=b'{"input": "Hi."}', headers={**evil, "Content-Type": "text/plain"})
    assert r.status_code == 400


def test_cors_allow_list_is_exact() -> None:
    app = FastAPI()
    install_http_guards(app, ServerSettings(cors_allow_origins=("https://ok.example",)))

    @app.get("/x")
    def x() -> dict:
        return {}

    async def run(origin: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get("/x", headers={"Origin": origin})

    assert run_coro(run("https://ok.example")).headers["access-control-allow-origin"] == "https://ok.example"
    assert "access-control-allow-origin" not in run_coro(run("https://evil.example")).headers
    with pytest.raises(ValueError):
        ServerSettings(cors_allow_origins=("*",))


def test_settings_are_checked() -> None:
    settings = ServerSettings(max_upload_bytes=3 * 2**20, max_text_chars=100)
    assert settings.body_limit_bytes == 4 * 2**20 + 1200 + 65536
    assert settings.inflight_body_limit_bytes == 4 * settings.body_limit_bytes
    assert ServerSettings(remote_audio_allow_hosts=[" 127.0.0.1:1 "]).remote_audio_allow_hosts == ("127.0.0.1:1",)
    for bad in ({"max_upload_bytes": 0}, {"max_ref_audio_s": 0}, {"max_body_bytes": True},
                {"remote_audio_allow_hosts": "127.0.0.1"}, {"remote_audio_max_redirects": 11},
                {"ref_audio_max_channels": 0}):
        with pytest.raises(ValueError):
            ServerSettings(**bad)
    assert INPROC_MAX_REF_S < 600  # the corpus' 10-minute clips must exceed the limit
