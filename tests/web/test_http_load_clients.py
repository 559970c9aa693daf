"""bench/http/clients.py and bench/http/runs.py: the load bench's client processes against a real
server (`create_app` on uvicorn, tiny checkpoints), with the official openai SDK and raw httpx; the
CPU split of bench/http/server.py on a real process; the listener target. No timing is asserted:
only that every request is read whole, counted once, and summarised consistently."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil
import pytest
from support.server_helpers import ServerThread, tiny_synthesizer_factory

from bench.http.clients import ClientPool, RequestSpec
from bench.http.runs import Target, median_run
from bench.http.server import cpu_snapshot, cpu_split
from studio.app import create_app
from studio.service import SynthesizerService
from studio.settings import ServerSettings
from tts_core.config import EngineConfig

FRAMES = 6
TEXT = "Every listener gets the whole answer."


@pytest.fixture(scope="module")
def url(data_dir: Path, tmp_path_factory):
    service = SynthesizerService(tiny_synthesizer_factory(data_dir, tmp_path_factory.mktemp("voices"),
                                                          EngineConfig(max_active_streams=4, max_queue=8)))
    service.start(background=False)
    assert service.wait(0), service.error
    with ServerThread(create_app(service, ServerSettings())) as server:
        yield server.url
    service.close()


@pytest.fixture(scope="module")
def pool():
    with ClientPool(2) as clients:
        yield clients


@pytest.mark.parametrize(("fmt", "client"), [("pcm", "httpx"), ("mp3", "httpx"), ("mp3", "sdk"), ("opus", "sdk")])
def test_every_request_is_read_whole_and_seen_by_its_listener(url, pool, fmt: str, client: str) -> None:
    result = pool.run(RequestSpec(url, fmt, True, FRAMES, TEXT, client), [1, 2, 3])
    assert result.errors == [] and len(result.views) == 3 and result.workers == 2
    for view in result.views:
        # The tiny model may stop before its cap: at most FRAMES frames of 80 ms, and some audio.
        assert 0 < view["audio_s"] <= FRAMES * 0.08 + 0.05, view
        assert 0 < view["ttfb_s"] <= view["last_byte_s"] and view["end_s"] >= view["last_byte_s"]
        assert view["bytes"] > 0 and view["underruns"] >= 0
    assert result.wall_s == max(v["end_s"] for v in result.views)
    assert result.client_cpu_s > 0 and result.loop in ("asyncio", "uvloop")


def test_a_refused_request_is_an_error_of_the_run_not_of_the_bench(url, pool) -> None:
    result = pool.run(RequestSpec(url, "opus", True, FRAMES, TEXT, "httpx", voice="no-such-voice"), [1])
    assert result.views == [] and len(result.errors) == 1 and "404" in result.errors[0]


def test_cpu_split_counts_the_main_thread_ended_threads_and_the_rest() -> None:
    me = psutil.Process()
    before = cpu_snapshot(me)

    def spin(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    worker = threading.Thread(target=spin, args=(0.3,))
    worker.start()
    worker.join()  # ended before the second snapshot
    spin(0.2)  # this (main) thread
    split = cpu_split(before, cpu_snapshot(me))
    assert split["ended_threads_s"] >= 0.25 and split["event_loop_s"] >= 0.15
    # Child processes (servers and browsers other tests started) count in the total, apart.
    parts = split["event_loop_s"] + split["ended_threads_s"] + split["other_threads_s"] + split["children_s"]
    assert split["total_s"] == pytest.approx(parts)


def test_the_target_and_the_median_of_runs() -> None:
    good = {"errors": 0, "completed": 4, "underruns": 0, "behind_real_time": 0, "ttfb_p95_ms": 250.0}
    target = Target(ttfb_p95_ms=300)
    assert target.holds(good)
    for change in ({"underruns": 1}, {"behind_real_time": 1}, {"ttfb_p95_ms": 301.0}, {"errors": 1}, {"completed": 0}):
        assert not target.holds({**good, **change}), change
    runs = [{**good, "x_realtime": x, "holds": h, "client_loop": "asyncio"} for x, h in ((3.0, True), (1.0, False), (2.0, True))]
    summary = median_run(runs)
    assert summary["x_realtime"] == 2.0 and summary["holds"] is False and summary["runs"] == 3
    assert summary["client_loop"] == "asyncio"


def test_profile_summary_shares_samples_by_thread_role(tmp_path) -> None:
    from bench.http.profile import summarize

    raw = tmp_path / "server.pyspy"  # py-spy's raw format: collapsed stacks, then a sample count
    raw.write_text(
        "thread (1): MainThread;run_forever (asyncio/base_events.py:607);write (asyncio/selector_events.py:1057) 6\n"
        "thread (7): stream-pump-3;StreamPump._run (studio/stream_pump.py:95);encode (tts_core/encoders.py:189) 3\n"
        "thread (9): tts-engine;Engine._run (tts_core/engine/engine.py:178);launch (tts_core/engine/runner.py:281) 1\n")
    summary = summarize(raw)
    assert summary["samples"] == 10
    assert summary["roles"] == {"event loop": 0.6, "stream pumps": 0.3, "engine": 0.1}
    assert next(iter(summary["top_frames"])) == "write (asyncio/selector_events.py:1057)"
    assert summary["top_frames_by_role"]["stream pumps"] == {"encode (tts_core/encoders.py:189)": 0.3}
