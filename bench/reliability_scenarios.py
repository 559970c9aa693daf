"""The reliability scenarios as measurements (tests/reliability/test_reliability_*.py assert on the same
scenarios, with the same clients: tests/support/reliability_clients.py and tests/support/reliability_attacks.py):
clients that load, abandon, queue and soak a running `python app.py`."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
from support.reliability_clients import LONG_TEXT, abort_client, load_client, stream_body

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
