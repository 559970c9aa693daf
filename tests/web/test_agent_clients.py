"""The stock voice-agent clients, unchanged but for their base URL, against `python app.py` started as
a user starts it (tiny checkpoints, an API key from MOSS_TTS_API_KEY): Pipecat's CartesiaTTSService,
DeepgramTTSService and OpenAITTSService, LiveKit's cartesia.TTS and openai.TTS (the released packages pinned in
requirements-dev.txt). Events are counted, never timed."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
from support.e2e_helpers import ARTIFACTS, STARTUP_TIMEOUT_S, AppServer, app_command, free_port
from support.folders import REPO_ROOT
from support.reliability_common import run_coro
from support.server_helpers import app_process, wait_for_idle, wait_until_ready
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tts_core.speaking.words import split_words

pipecat_tests = pytest.importorskip("pipecat.tests.utils", reason="pipecat-ai (requirements-dev.txt) not installed")
pytest.importorskip("livekit.plugins.cartesia", reason="livekit-plugins-cartesia not installed")

KEY = "agents-test-key"
TEXT = "Hello there, how are you?"


@pytest.fixture(scope="module")
def agent_app(data_dir, tmp_path_factory) -> Iterator[AppServer]:
    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    env = {**os.environ, "PORT": str(port), "MOSS_TTS_API_KEY": KEY, "HF_HUB_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", "MOSS_TTS_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
           "PYTHONUNBUFFERED": "1", "MOSS_TTS_NUM_THREADS": os.environ.get("MOSS_TTS_NUM_THREADS", "1")}
    env.pop("SPACE_ID", None)
    log_path = ARTIFACTS / "agent-app.log"
    with app_process([*app_command(data_dir), "--no-ui"], cwd=REPO_ROOT, env=env, log_path=log_path) as process:
        server = AppServer(url=f"http://127.0.0.1:{port}/", process=process, log_path=log_path)
        wait_until_ready(server, STARTUP_TIMEOUT_S)
        yield server


def _ws_url(server: AppServer) -> str:
    return server.url.replace("http", "ws", 1) + "tts/websocket"


def _idle(server: AppServer) -> None:
    assert wait_for_idle(server.health, 60)["active_streams"] == 0


@pytest.fixture(autouse=True)
def _pipecat_runner_in_a_thread(monkeypatch):
    """The clients' loops run in a thread of their own (`run_coro`: Playwright's sync API holds the
    main thread's loop), where a signal handler cannot be set: the test runner's Ctrl-C handler is
    left out (nothing else of the runner or the clients changes)."""
    from pipecat.workers.runner import WorkerRunner

    monkeypatch.setattr(WorkerRunner, "_setup_sigint", lambda self: None)


def test_the_socket_wants_the_key_where_the_clients_put_it(agent_app):
    with pytest.raises(InvalidStatus) as refused:
        connect(_ws_url(agent_app))
    assert refused.value.response.status_code == 401
    with connect(_ws_url(agent_app) + f"?api_key={KEY}") as ws:
        ws.send("{}")  # no transcript, no output_format: an error, the socket stays open
        assert '"type":"error"' in ws.recv(timeout=30)


def test_health_and_the_log_say_a_key_is_set_never_which(agent_app):
    health = httpx.get(agent_app.url + "health", timeout=30)
    assert KEY not in health.text and health.json()["config"]["server"]["api_key"] == "set"
    log = agent_app.log_path.read_text()
    assert '"api_key": "set"' in log and KEY not in log  # the configuration logged at start


def test_pipecat_cartesia_service_speaks_with_word_timestamps(agent_app):
    from pipecat.frames.frames import (
        ErrorFrame,
        TTSAudioRawFrame,
        TTSSpeakFrame,
        TTSStoppedFrame,
        TTSTextFrame,
    )
    from pipecat.services.cartesia.tts import CartesiaTTSService

    tts = CartesiaTTSService(api_key=KEY, url=_ws_url(agent_app), sample_rate=24000,
                             settings=CartesiaTTSService.Settings(voice="alloy"))
    down, up = run_coro(pipecat_tests.run_test(tts, frames_to_send=[TTSSpeakFrame(TEXT)]))
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    words = [f for f in down if isinstance(f, TTSTextFrame)]
    assert not [f for f in [*down, *up] if isinstance(f, ErrorFrame)]
    assert len(audio) > 1 and {f.sample_rate for f in audio} == {24000} and {f.num_channels for f in audio} == {1}
    assert sum(len(f.audio) for f in audio) % 2 == 0
    assert [f.text for f in words] == split_words(TEXT)
    assert [f.pts for f in words] == sorted(f.pts for f in words)
    assert sum(isinstance(f, TTSStoppedFrame) for f in down) == 1
    _idle(agent_app)


def _cancels(server: AppServer) -> float:
    for line in httpx.get(server.url + "metrics", timeout=10).text.splitlines():
        if line.startswith('tts_agent_cancels_total{protocol="cartesia"}'):
            return float(line.split()[-1])
    return 0.0


def test_pipecat_cartesia_barge_in_cancels_the_context_on_the_server(agent_app):
    from pipecat.frames.frames import InterruptionFrame, TTSSpeakFrame
    from pipecat.services.cartesia.tts import CartesiaTTSService

    before = _cancels(agent_app)
    tts = CartesiaTTSService(api_key=KEY, url=_ws_url(agent_app), sample_rate=24000)
    long_text = " ".join(["This reply goes on and on, for quite a long while yet, until it is interrupted."] * 5)
    frames = [TTSSpeakFrame(long_text), pipecat_tests.SleepFrame(sleep=1.0), InterruptionFrame()]
    run_coro(pipecat_tests.run_test(tts, frames_to_send=frames))  # speaking for far longer than 1 s
    assert _cancels(agent_app) == before + 1  # Pipecat sent its cancel; the server counted it
    _idle(agent_app)  # and the slot is free


def test_pipecat_deepgram_service_speaks(agent_app):
    from pipecat.frames.frames import ErrorFrame, TTSAudioRawFrame, TTSSpeakFrame, TTSStoppedFrame
    from pipecat.services.deepgram.tts import DeepgramTTSService

    tts = DeepgramTTSService(api_key=KEY, base_url=agent_app.url.replace("http", "ws", 1).rstrip("/"),
                             sample_rate=16000)  # its default voice, an aura-2 name: the default preset
    down, up = run_coro(pipecat_tests.run_test(tts, frames_to_send=[TTSSpeakFrame(TEXT)]))
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert not [f for f in [*down, *up] if isinstance(f, ErrorFrame)]
    assert audio and {f.sample_rate for f in audio} == {16000} and sum(len(f.audio) for f in audio) % 2 == 0
    assert sum(isinstance(f, TTSStoppedFrame) for f in down) == 1  # its end of turn: our Flushed
    _idle(agent_app)


def test_pipecat_openai_service_speaks(agent_app):
    from pipecat.frames.frames import ErrorFrame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.services.openai.tts import OpenAITTSService

    tts = OpenAITTSService(api_key=KEY, base_url=agent_app.url + "v1", voice="alloy", sample_rate=24000)
    down, up = run_coro(pipecat_tests.run_test(tts, frames_to_send=[TTSSpeakFrame(TEXT)]))
    errors = [f.error for f in [*down, *up] if isinstance(f, ErrorFrame)]
    assert not errors, errors  # e.g. "completed with no audio" while the body is not streamed progressively
    assert sum(len(f.audio) for f in down if isinstance(f, TTSAudioRawFrame)) > 0
    _idle(agent_app)


def _livekit(coroutine_factory):
    import aiohttp

    async def run():
        async with aiohttp.ClientSession() as session:
            return await coroutine_factory(session)

    return run_coro(run())


def test_livekit_cartesia_stream_speaks_with_timed_transcript(agent_app):
    from livekit.plugins import cartesia

    async def run(session):
        tts = cartesia.TTS(api_key=KEY, base_url=agent_app.url.rstrip("/"), http_session=session, voice="alloy")
        stream = tts.stream()
        for token in ["Hello", " there,", " how are", " you?"]:  # an LLM's pace, a few words at a time
            stream.push_text(token)
        stream.end_input()
        frames = [event.frame async for event in stream]
        await stream.aclose()
        await tts.aclose()
        return frames

    frames = _livekit(run)
    assert len(frames) > 1 and {f.sample_rate for f in frames} == {24000} and {f.num_channels for f in frames} == {1}
    assert sum(f.samples_per_channel for f in frames) > 0
    _idle(agent_app)


def test_livekit_openai_tts_speaks(agent_app):
    from livekit.plugins import openai

    async def run(_session):
        tts = openai.TTS(api_key=KEY, base_url=agent_app.url + "v1")
        frame = await tts.synthesize(TEXT).collect()
        await tts.aclose()
        return frame

    frame = _livekit(run)
    assert frame.samples_per_channel > 0 and frame.sample_rate == 24000
    _idle(agent_app)


def test_metrics_count_the_agent_sockets(agent_app):
    text = httpx.get(agent_app.url + "metrics", timeout=10).text
    assert 'tts_agent_refused_total{protocol="cartesia",reason="unauthorized"}' in text
    assert 'tts_agent_sessions_total{protocol="cartesia"}' in text
