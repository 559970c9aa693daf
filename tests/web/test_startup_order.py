"""Start-up order of `python app.py`: the API first, the Gradio page once the model has settled and
no stream is in progress. Ordered by events (gates the test opens), never by timing."""

from __future__ import annotations

import threading
import time
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI
from starlette.responses import PlainTextResponse
from support.server_helpers import ServerThread, tiny_synthesizer_factory

from studio.app import create_app
from studio.page_slot import PageApp, PageMode, PageRunner, PageSlot
from studio.service import ServiceState, SynthesizerService
from studio.settings import ServerSettings
from tts_core.engine.idle import IdleSignal
from tts_core.errors import ModelLoadError

STREAM = {"text": "Hello there.", "mode": "continuation", "seed": 1, "max_frames": 6}


def _wait(predicate, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


class _FakeStream:
    """Enough of a `Stream` for the idle signal: end hooks."""

    def __init__(self):
        self.hooks = []

    def on_end(self, hook) -> None:
        self.hooks.append(hook)

    def end(self) -> None:
        for hook in self.hooks:
            hook(self)


class _FakeSynth:
    """A synthesizer whose engine's idle signal the test drives."""

    def __init__(self):
        self.engine = type("Engine", (), {})()
        self.engine.idle = IdleSignal()
        self.voices_warmed = threading.Event()
        self.voices_warmed.set()

    def stream(self) -> _FakeStream:
        stream = _FakeStream()
        self.engine.idle.track(stream)
        return stream


def test_wait_for_quiet_waits_for_the_model_then_for_streams_in_progress():
    synth, loaded, returned = _FakeSynth(), threading.Event(), threading.Event()
    service = SynthesizerService(lambda report: loaded.wait() and synth)
    service.start()

    def waiter() -> None:
        service.wait_for_quiet(quiet_s=0.05, max_wait_s=100)
        returned.set()

    threading.Thread(target=waiter, daemon=True).start()
    assert not returned.wait(0.2)  # the model is loading: the waiter blocks
    stream = synth.stream()  # a first listener asks at once
    loaded.set()
    assert service.wait(10)
    assert not returned.wait(0.3)  # its stream is in progress
    stream.end()
    assert returned.wait(10)  # once it has been quiet a while


def test_wait_for_quiet_returns_after_a_failed_load_too():
    def factory(report):
        raise ModelLoadError("no weights here")

    service = SynthesizerService(factory)
    service.start(background=False)
    service.wait_for_quiet(quiet_s=0.05)
    assert service.state is ServiceState.FAILED


def _text_app(text: str):
    async def app(scope, receive, send):
        await PlainTextResponse(text)(scope, receive, send)

    return app


def test_the_api_answers_while_the_page_is_built_and_the_page_follows():
    """PageRunner in a real server: routes answer and "/" says "starting" until the build ends."""
    turn, building, started = threading.Event(), threading.Event(), []

    def build() -> PageApp:
        building.set()
        assert turn.wait(60)

        @asynccontextmanager
        async def lifespan():
            started.append("up")
            yield
            started.append("down")

        return PageApp(app=_text_app("the page"), blocks=None, lifespan=lifespan)

    slot = PageSlot(PageMode.DEFERRED)
    runner = PageRunner(slot, build, wait_turn=lambda: None)

    @asynccontextmanager
    async def lifespan(_):
        async with runner.running():
            yield

    app = FastAPI(lifespan=lifespan)
    app.get("/v1/ping")(lambda: {"ok": True})
    app.mount("/", slot)
    with ServerThread(app) as server:
        assert building.wait(30)
        assert httpx.get(server.url + "/v1/ping").json() == {"ok": True}
        page = httpx.get(server.url + "/")
        assert page.status_code == 503 and "Starting" in page.text and page.headers["retry-after"] == "2"
        asset = httpx.get(server.url + "/gradio_api/info")
        assert asset.status_code == 503 and asset.json()["error"]["code"] == "page_starting"
        turn.set()
        assert runner.served.wait(30)
        assert httpx.get(server.url + "/").text == "the page" and started == ["up"]
    assert started == ["up", "down"]  # the page's lifespan ends with the server


def test_a_page_that_fails_to_build_leaves_the_api_serving():
    def build() -> PageApp:
        raise RuntimeError("gradio is not installed")

    slot = PageSlot(PageMode.DEFERRED)
    runner = PageRunner(slot, build, wait_turn=lambda: None)

    @asynccontextmanager
    async def lifespan(_):
        async with runner.running():
            yield

    app = FastAPI(lifespan=lifespan)
    app.get("/v1/ping")(lambda: {"ok": True})
    app.mount("/", slot)
    with ServerThread(app) as server:
        _wait(lambda: slot.failed, "the build to fail")
        answer = httpx.get(server.url + "/")
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "page_failed"
        assert "gradio" not in answer.text  # the cause is in the server log only
        assert httpx.get(server.url + "/v1/ping").status_code == 200


class _GatedService(SynthesizerService):
    """The real service, with the page's turn given by the test instead of by quiet."""

    def __init__(self, factory, turn: threading.Event):
        super().__init__(factory)
        self.turn = turn

    def wait_for_quiet(self, **_) -> None:
        assert self.turn.wait(120)


def test_the_app_streams_audio_before_its_gradio_page_exists(data_dir, tmp_path):
    turn = threading.Event()
    service = _GatedService(tiny_synthesizer_factory(data_dir, tmp_path), turn)
    app = create_app(service, ServerSettings(), page=PageMode.DEFERRED)
    with ServerThread(app) as server:
        assert httpx.get(server.url + "/").status_code == 503
        _wait(lambda: service.state is ServiceState.READY, "the tiny model")
        with httpx.stream("POST", server.url + "/api/tts/stream", json=STREAM, timeout=60) as response:
            assert response.status_code == 200
            assert next(response.iter_bytes())  # first audio, while the page is not built
        assert not app.state.page_runner.served.is_set()
        health = httpx.get(server.url + "/health").json()
        assert health["status"] == "ready" and health["page"] == "building"
        turn.set()
        assert app.state.page_runner.served.wait(120)
        page = httpx.get(server.url + "/")
        assert page.status_code == 200 and "gradio" in page.text.lower()
        assert httpx.get(server.url + "/health").json()["page"] == "served"
        assert app.state.page.has_launched  # Gradio's file checks are on, as launch() would set


def test_no_ui_serves_the_api_alone(data_dir, tmp_path):
    service = SynthesizerService(tiny_synthesizer_factory(data_dir, tmp_path))
    app = create_app(service, ServerSettings(), page=PageMode.OFF)
    with ServerThread(app) as server:
        answer = httpx.get(server.url + "/")
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "page_disabled"
        assert httpx.get(server.url + "/health").status_code in (200, 503)


def test_the_page_waits_for_the_synthesizers_voice_warm_up():
    synth, returned = _FakeSynth(), threading.Event()
    synth.voices_warmed.clear()
    service = SynthesizerService(lambda report: synth)
    service.start(background=False)

    def waiter() -> None:
        service.wait_for_quiet(quiet_s=0.05, max_wait_s=100)
        returned.set()

    threading.Thread(target=waiter, daemon=True).start()
    assert not returned.wait(0.3)  # its voice warm-up (reads of cached codes) is still running
    synth.voices_warmed.set()
    assert returned.wait(10)


def test_an_empty_caches_long_voice_warm_up_delays_the_page_a_few_seconds_only(monkeypatch):
    monkeypatch.setattr("studio.service.VOICES_WAIT_S", 0.2)
    synth = _FakeSynth()
    synth.voices_warmed.clear()  # encoding every preset's clip: never set here
    service = SynthesizerService(lambda report: synth)
    service.start(background=False)
    done = threading.Event()
    threading.Thread(target=lambda: (service.wait_for_quiet(quiet_s=0.05, max_wait_s=100), done.set()),
                     daemon=True).start()
    assert done.wait(30)  # it stops waiting for the warm-up after VOICES_WAIT_S


def _runner_with(build, slot: PageSlot):
    runner = PageRunner(slot, build, wait_turn=lambda: None)

    @asynccontextmanager
    async def lifespan(_):
        async with runner.running():
            yield

    app = FastAPI(lifespan=lifespan)
    app.mount("/", slot)
    return runner, app


def test_a_build_that_met_cpythons_ast_race_is_run_again():
    attempts = []

    def build() -> PageApp:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=153, after=38)")

        @asynccontextmanager
        async def lifespan():
            yield

        return PageApp(app=_text_app("the page"), blocks=None, lifespan=lifespan)

    runner, app = _runner_with(build, PageSlot(PageMode.DEFERRED))
    with ServerThread(app) as server:
        assert runner.served.wait(30)
        assert httpx.get(server.url + "/").text == "the page" and len(attempts) == 2


def test_other_build_errors_are_not_retried():
    attempts = []

    def build() -> PageApp:
        attempts.append(1)
        raise SystemError("something else")

    slot = PageSlot(PageMode.DEFERRED)
    _, app = _runner_with(build, slot)
    with ServerThread(app):
        _wait(lambda: slot.failed, "the build to fail")
    assert attempts == [1] and slot.state == "failed"
