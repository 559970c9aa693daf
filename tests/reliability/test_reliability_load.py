"""Load, disconnects, queueing and a soak against `python app.py` (tiny checkpoints, 4 streams, a
queue of 12), measured from outside with psutil. Clients are shared with bench/reliability/figures.py
(`reliability_clients`); every loop is bounded in count and in time."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from support.reliability_common import PROC_MAX_ACTIVE, PROC_MAX_QUEUE, b64, run_coro

from bench.lib.reliability_clients import abort_client, leave_while_queued, load_client, soak_request

pytestmark = pytest.mark.slow

@pytest.mark.timeout(240)
def test_load_32_concurrent_streams(app_proc, figures) -> None:
    """32 clients at once on 4 slots + 12 queue places: each is served in full or refused with
    503 + Retry-After; afterwards the engine is idle and the server still answers."""
    app_proc.wait_idle()
    before = app_proc.health()

    async def run() -> list[tuple[str, str]]:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=app_proc.url, timeout=120, limits=limits) as client:
            return await asyncio.wait_for(asyncio.gather(*(load_client(client, i) for i in range(32))), 200)

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
                    asyncio.gather(*(abort_client(client, 10 * wave + i) for i in range(10))), 60)
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

    # The bench measures the same scenario (bench/lib/reliability_clients.py): one client for both.
    results, still_queued, _ = run_coro(leave_while_queued(app_proc.url, PROC_MAX_ACTIVE, 6))
    assert results == ["gave up"] * 6
    health = app_proc.wait_idle(timeout_s=30)
    done = (health["cancelled"] + health["finished"]) - (before["cancelled"] + before["finished"])
    assert done == PROC_MAX_ACTIVE + 6, (before, health)
    figures["left_while_queued"] = {"clients": 6, "queued_after_they_left": still_queued,
                                    "engine_idle_afterwards": True}


@pytest.mark.timeout(600)  # a hang guard only: how long the soak takes is a figure, not a check
def test_soak_300_sequential_requests(app_proc, clip_wav, figures) -> None:
    """300 mixed requests one after another (4 audio routes/formats, cloning, a 404): resident
    memory grows less than 10 % after a 30-request warm-up, threads and fds stay flat."""
    clip_b64 = b64(clip_wav)
    counts = {"ok": 0, "client_error": 0, "refused": 0}
    with httpx.Client(base_url=app_proc.url, timeout=60) as client:
        for index in range(30):  # warm-up: every kind of request, caches and pools filled
            assert soak_request(client, index, clip_b64).status_code in (200, 404)
        app_proc.wait_idle()
        before = app_proc.pruned_snapshot()
        started = time.monotonic()
        for index in range(30, 330):
            response = soak_request(client, index, clip_b64)
            expected = 404 if index % 6 == 3 else 200
            assert response.status_code == expected, (index, response.status_code, response.text[:300])
            counts["ok" if expected == 200 else "client_error"] += 1
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
