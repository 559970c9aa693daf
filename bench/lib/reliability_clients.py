"""Clients of the reliability scenarios, shared by the tests (which assert) and
`python -m bench.reliability.figures` (which measures): well-behaved load, clients that leave, a
soak mix, a normal listener timing its first audio, and the scenarios they make against a running
`python app.py` (load, a disconnect storm, clients leaving the queue)."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time

import httpx

SAMPLES_PER_FRAME = 3840  # per channel, 80 ms at 48 kHz
LONG_TEXT = " ".join(f"This is sentence number {i}, and it keeps the stream busy for a while." for i in range(6))


PLAYER_ROUTE = "/api/tts/stream"


def stream_body(index: int, *, max_frames: int | None, text: str | None = None) -> tuple[str, dict, int]:
    """(route, JSON body, bytes per sample), alternating the two streaming routes, both 16-bit stereo."""
    text = text or f"Load test number {index}, please stand by."
    extra = {"max_frames": max_frames} if max_frames else {}
    if index % 2:  # 16-bit stereo in the player's event frames
        return PLAYER_ROUTE, {"text": text, "seed": index, "transport": "s16", **extra}, 2
    return "/v1/audio/speech", {"input": text, "response_format": "pcm", "stream": True, "seed": index, **extra}, 2


def audio_of(route: str, data: bytes) -> bytes:
    """The audio bytes of a response body: the player's route frames them (docs/PROTOCOL.md §2.3)."""
    if route != PLAYER_ROUTE:
        return data
    return b"".join(payload for kind, payload in _frames(data) if kind == 0)


def _frames(body: bytes) -> list[tuple[int, bytes]]:
    """[u32 LE length][u8 kind][payload] frames; a truncated last frame is left out."""
    frames, at = [], 0
    while len(body) - at >= 5:
        length, kind = struct.unpack_from("<IB", body, at)
        if len(body) - at - 5 < length:
            break
        frames.append((kind, body[at + 5: at + 5 + length]))
        at += 5 + length
    return frames


async def load_client(client: httpx.AsyncClient, index: int, max_frames: int = 6) -> tuple[str, str]:
    """("served" | "refused" | "broken", why): served = whole frames, at most the cap; refused =
    503 queue_full + Retry-After."""
    route, body, sample_bytes = stream_body(index, max_frames=max_frames)
    try:
        async with client.stream("POST", route, json=body) as response:
            data = b"".join([chunk async for chunk in response.aiter_raw()])
    except httpx.HTTPError as exc:
        return "broken", f"{index}: {type(exc).__name__} {exc}"
    if response.status_code == 200:
        audio = audio_of(route, data)
        whole = len(audio) > 0 and len(audio) % (2 * sample_bytes) == 0
        if whole and len(audio) <= max_frames * 2 * sample_bytes * SAMPLES_PER_FRAME:
            return "served", ""
        return "broken", f"{index}: 200 with {len(audio)} bytes of audio"
    if response.status_code == 503:
        retry = response.headers.get("retry-after", "")
        if json.loads(data)["error"]["code"] == "queue_full" and retry.isdigit() and int(retry) >= 1:
            return "refused", ""
    return "broken", f"{index}: HTTP {response.status_code} {data[:200]!r}"


async def abort_client(client: httpx.AsyncClient, index: int) -> str:
    """Start a long stream, read the first audio, then drop the connection."""
    route, body, sample_bytes = stream_body(index, max_frames=None, text=LONG_TEXT)
    async with client.stream("POST", route, json=body) as response:
        if response.status_code != 200:
            return f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
        received = 0
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if received >= sample_bytes * 2 * 8:  # audio is flowing (past a frame header): leave mid-stream
                return "aborted"
    return "finished"  # the whole stream arrived before we left (a very short babble)


def soak_request(client: httpx.Client, index: int, clip_b64: str) -> httpx.Response:
    """Six kinds in turn: raw stream, WAV, streamed PCM, unknown voice (404), MP3, voice cloning."""
    kind, text = index % 6, f"Soak request {index}."
    speech = {"input": text, "seed": index, "max_frames": 2}
    if kind == 0:
        return client.post("/api/tts/stream", json={"text": text, "seed": index, "max_frames": 2})
    if kind == 1:
        return client.post("/v1/audio/speech", json={**speech, "response_format": "wav"})
    if kind == 2:
        return client.post("/v1/audio/speech", json={**speech, "response_format": "pcm", "stream": True})
    if kind == 3:
        return client.post("/v1/audio/speech", json={**speech, "voice": "no-such-voice"})
    if kind == 4:
        return client.post("/v1/audio/speech", json={**speech, "response_format": "mp3"})
    return client.post("/api/tts/stream", json={"text": text, "seed": index, "max_frames": 2, "ref_audio": clip_b64})


def listen(url: str, *, text: str = "Hello there, this is a normal listener.", max_frames: int = 4,
           seed: int = 7, timeout_s: float = 120.0) -> tuple[float | None, int, int]:
    """A normal listener: POST /api/tts/stream on a fresh connection and read it all.

    Returns (seconds from sending the request to the first audio byte or None, audio bytes, status).
    """
    body = {"text": text, "max_frames": max_frames, "seed": seed}
    first: float | None = None
    received = 0
    with httpx.Client(timeout=timeout_s, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        started = time.perf_counter()
        with client.stream("POST", url + "/api/tts/stream", json=body) as response:
            status = response.status_code
            for chunk in response.iter_raw():
                if chunk and first is None and status == 200:
                    first = time.perf_counter() - started
                received += len(chunk)
    return first, (received if status == 200 else 0), status


def raw_http(port: int, head: str, body_parts: list[bytes] = (), *, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """Send a hand-made request on a socket (so nothing is normalised) and return (status, raw reply).
    Status 0: the server closed the connection without an answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        try:
            sock.sendall(head.encode("latin-1"))
            for part in body_parts:
                sock.sendall(part)
        except OSError:  # the server may answer and close before the body is sent: that is the point
            pass
        reply = read_reply(sock, timeout_s)
    return (int(reply[9:12]) if reply.startswith(b"HTTP/1.1 ") else 0), reply


def read_reply(sock: socket.socket, timeout_s: float) -> bytes:
    """Read one HTTP reply (head + Content-Length body), or what came before the connection closed."""
    reply = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
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
    return reply


# ---- scenarios ----------------------------------------------------------------------------------

QUEUE_PATIENCE_S = 0.5


async def load(url: str, clients: int) -> list[str]:
    limits = httpx.Limits(max_connections=2 * clients, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        return [kind for kind, _ in await asyncio.gather(*(load_client(client, i) for i in range(clients)))]


async def storm(url: str, waves: int, per_wave: int) -> list[str]:
    results: list[str] = []
    limits = httpx.Limits(max_connections=per_wave + 6, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        for wave in range(waves):
            results += await asyncio.gather(*(abort_client(client, per_wave * wave + i) for i in range(per_wave)))
    return results


async def leave_while_queued(url: str, holders: int, impatient: int) -> tuple[list[str], int, float | None]:
    """`holders` streams take every slot; `impatient` more give up while queued. Returns their
    outcomes, how many requests /health still showed queued right after they left, and how long
    until it showed none (None: not within 5 s), the holders still holding every slot."""
    release = asyncio.Event()
    limits = httpx.Limits(max_connections=holders + impatient + 4, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def holder(index: int) -> None:
            route, body, _ = stream_body(index, max_frames=None, text=LONG_TEXT)
            async with client.stream("POST", route, json=body) as response:
                # The first audio, then hold the stream unread until released. The iterator is kept:
                # one left behind by a `break` closes the connection whenever it is finalised, which
                # was at times within 20 ms, before the other holders had their slots.
                chunks = response.aiter_raw()
                await anext(chunks)
                await release.wait()
                await chunks.aclose()

        async def give_up(index: int) -> str:
            route, body, _ = stream_body(index, max_frames=None, text=LONG_TEXT)
            try:
                await asyncio.wait_for(client.post(route, json=body), QUEUE_PATIENCE_S)
            except asyncio.TimeoutError:
                return "gave up"
            return "answered"

        tasks = [asyncio.create_task(holder(i)) for i in range(holders)]
        deadline = time.monotonic() + 60
        while (health := (await client.get("/health")).json())["active_streams"] < holders:
            if time.monotonic() > deadline:
                done = [task.exception() if task.done() else "running" for task in tasks]
                raise RuntimeError(f"the holders never got their slots: {health}; holders: {done}")
            await asyncio.sleep(0.05)
        results = await asyncio.gather(*(give_up(100 + i) for i in range(impatient)))
        left_at = time.monotonic()
        still_queued = queued = (await client.get("/health")).json()["queued"]
        while queued and time.monotonic() - left_at < 5.0:
            await asyncio.sleep(0.02)
            queued = (await client.get("/health")).json()["queued"]
        cleared_after_s = None if queued else round(time.monotonic() - left_at, 2)
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    return results, still_queued, cleared_after_s
