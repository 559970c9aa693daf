"""The reliability scenarios as measurements (the tests in tests/test_reliability.py assert on the
same scenarios): clients that load, abandon, queue and soak a running `python app.py`."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx

SAMPLES_PER_FRAME = 3840  # per channel, 80 ms at 48 kHz
LONG_TEXT = " ".join(f"This is sentence number {i}, and it keeps the stream busy for a while." for i in range(6))
QUEUE_PATIENCE_S = 0.5


def stream_body(index: int, *, max_frames: int | None, text: str | None = None) -> tuple[str, dict, int]:
    """(route, JSON body, bytes per stereo sample), alternating the two streaming routes."""
    text = text or f"Load test number {index}, please stand by."
    extra = {"max_frames": max_frames} if max_frames else {}
    if index % 2:
        return "/api/tts/stream", {"text": text, "seed": index, **extra}, 8  # float32 stereo
    return "/v1/audio/speech", {"input": text, "response_format": "pcm", "stream": True, "seed": index, **extra}, 4


async def load_client(client: httpx.AsyncClient, index: int, max_frames: int = 6) -> str:
    """"served" (whole frames, at most the cap), "refused" (503 queue_full + Retry-After) or "broken"."""
    route, body, sample_bytes = stream_body(index, max_frames=max_frames)
    try:
        async with client.stream("POST", route, json=body) as response:
            data = b"".join([chunk async for chunk in response.aiter_raw()])
    except httpx.HTTPError:
        return "broken"
    if response.status_code == 200:
        whole = len(data) > 0 and len(data) % (2 * sample_bytes) == 0
        return "served" if whole and len(data) <= max_frames * sample_bytes * SAMPLES_PER_FRAME else "broken"
    if response.status_code == 503:
        retry = response.headers.get("retry-after", "")
        if json.loads(data)["error"]["code"] == "queue_full" and retry.isdigit():
            return "refused"
    return "broken"


async def abort_client(client: httpx.AsyncClient, index: int) -> str:
    """Start a long stream, read the first audio, then drop the connection."""
    route, body, sample_bytes = stream_body(index, max_frames=None, text=LONG_TEXT)
    async with client.stream("POST", route, json=body) as response:
        if response.status_code != 200:
            return f"HTTP {response.status_code}"
        received = 0
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if received >= sample_bytes * 2:
                return "aborted"
    return "finished"


async def load(url: str, clients: int) -> list[str]:
    limits = httpx.Limits(max_connections=2 * clients, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        return await asyncio.gather(*(load_client(client, i) for i in range(clients)))


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
                async for _chunk in response.aiter_raw():
                    break
                await release.wait()

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


class PeakRss:
    """Samples a process's resident memory every 20 ms while a scenario runs (`with PeakRss(ps) as p:`)."""

    def __init__(self, process):
        self.process = process
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def _run(self) -> None:
        while True:
            self.peak_bytes = max(self.peak_bytes, self.process.memory_info().rss)
            if self._stop.wait(0.02):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self.process.memory_info().rss)
