"""Fixtures for the end-to-end tests: one headless Chromium per session with a fresh context per
test, and `serve_app`, the session's `python app.py` (the root conftest's `app_server`, shared by
every folder that asks for it). The app runs the tiny parity checkpoints from the shared data dir.

Without Chromium or Playwright the browser tests skip, unless MOSS_TTS_REQUIRE_BROWSER is set (CI's
`.ci/run` sets it): then they fail, so a CI machine that lost its browser cannot pass by skipping.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from support.server_helpers import app_process, free_port, wait_for_idle, wait_until_ready
from tts_core.env import env_flag

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
]
STARTUP_TIMEOUT_S = 150
REQUIRE_BROWSER = "MOSS_TTS_REQUIRE_BROWSER"


def browser_unavailable(reason: str) -> NoReturn:
    """Skip (the whole module when called at import), or fail when the browser tests are required."""
    if env_flag(REQUIRE_BROWSER):
        pytest.fail(f"{reason}; {REQUIRE_BROWSER} is set, so the browser tests must run, not skip",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def playwright_sync_api():
    """`playwright.sync_api`, or skip/fail (see `browser_unavailable`) when it is not installed."""
    try:
        from playwright import sync_api
    except ImportError as exc:
        browser_unavailable(f"playwright is not installed ({exc}): pip install -r requirements-dev.txt")
    return sync_api


# How much earlier than a real-time playhead could need it a chunk must reach the page to count as
# "in time": covers the page -> audio thread message hop and the audio device pulling a buffer of
# render quanta ahead of the clock. A chunk with less lead may be late through no fault of the player.
ARRIVAL_MARGIN_MS = 150.0


def chunks_arrived_in_time(arrivals: list, *, total_frames: int, prebuffer_ms: float,
                           rate_hz: int = 48_000, margin_ms: float = ARRIVAL_MARGIN_MS) -> bool:
    """True when generation provably outran playback: every chunk reached the player at least
    `margin_ms` before a real-time playhead could have needed it. Only then is a gap the player's
    fault; otherwise the generator (a slow, loaded machine) may have starved it.

    `arrivals`: the player's [ms since the request, frames received so far] per chunk. Playback
    starts no earlier than the arrival that completes the prebuffer (or the last arrival, for a
    stream shorter than the prebuffer); from that moment a real-time playhead needs frame F at
    start + F / rate. Assuming that earliest start is the strictest case: a later start only
    moves every deadline later.
    """
    if not arrivals or arrivals[-1][1] != total_frames:
        return False  # player.js records the first 400 arrivals only: nothing can be proved
    prebuffer_frames = prebuffer_ms * rate_hz / 1000
    start = next((i for i, (_, frames) in enumerate(arrivals) if frames >= prebuffer_frames), len(arrivals) - 1)
    start_ms = arrivals[start][0]
    for (arrived_ms, _), (_, frames_before) in zip(arrivals[start + 1:], arrivals[start:]):
        if arrived_ms + margin_ms > start_ms + 1000 * frames_before / rate_hz:
            return False
    return True


def assert_no_underruns(s: dict) -> None:
    assert s["underruns"] == 0 and s["underrunFrames"] == 0, (
        f"{s['underruns']} underruns at frames {s['underrunsAt']}; arrivals [ms, frames]: {s['arrivals']}")


def assert_underruns_accounted(s: dict) -> None:
    """Whatever the machine's speed: underruns, their silence and their positions agree."""
    count, at = s["underruns"], s["underrunsAt"]
    assert (count == 0) == (s["underrunFrames"] == 0), s
    assert len(at) == min(count, 20) and at == sorted(set(at)), s
    assert all(0 < frame <= s["framesRendered"] for frame in at), s  # a gap begins after some audio


def assert_gapless_where_provable(s: dict, prebuffer_ms: float = 200) -> bool:
    """No gap after playback started, asserted only where every chunk provably arrived in time
    (a slow, loaded machine may starve the player without it being at fault); the accounting is
    asserted always. Returns whether the audio was provably gapless (the rendered samples then
    equal the source exactly)."""
    assert_underruns_accounted(s)
    if chunks_arrived_in_time(s["arrivals"], total_frames=s["framesReceived"], prebuffer_ms=prebuffer_ms):
        assert_no_underruns(s)
        return True
    return s["underruns"] == 0


STATIC_DIR = REPO_ROOT / "static"
STATIC_ORIGIN = "http://player.test"  # static/ served by the page's own route handler: nothing leaves the browser


def _serve_static(route) -> None:
    name = route.request.url.removeprefix(STATIC_ORIGIN).split("?")[0].lstrip("/")
    path = STATIC_DIR / name
    if name and path.is_file() and path.resolve().is_relative_to(STATIC_DIR):
        route.fulfill(body=path.read_text(), content_type="text/javascript")
    else:
        route.fulfill(body="<!doctype html><title>module harness</title>", content_type="text/html")


@pytest.fixture
def static_page(browser):
    """A blank page on an origin that serves static/, so tests can `import('/player/framing.js')` etc."""
    page = browser.new_page()
    page.route(f"{STATIC_ORIGIN}/**", _serve_static)
    page.goto(f"{STATIC_ORIGIN}/harness.html")
    yield page
    page.close()


@dataclass
class AppServer:
    url: str  # ends with "/"
    process: subprocess.Popen
    log_path: Path

    def health(self) -> dict:
        return httpx.get(self.url + "health", timeout=10).json()

    def log_tail(self, num_chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-num_chars:]

    def wait_for_idle(self, timeout_s: float = 10.0) -> dict:
        """Poll /health until no stream is active or queued; returns the last health."""
        return wait_for_idle(self.health, timeout_s)


def app_command(data_dir: Path) -> list[str]:
    return [
        sys.executable, "app.py",
        "--lm", str(data_dir / "parity" / "tiny_lm"),
        "--codec", str(data_dir / "parity" / "tiny_codec"),
        "--tokenizer", str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
        "--voices-dir", str(data_dir / "presets"),
    ]


@contextmanager
def serve_app(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    """`python app.py` as a user starts it (PORT from the environment), polled until the model is ready."""
    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    env = {
        **os.environ, "PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "MOSS_TTS_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
        "PYTHONUNBUFFERED": "1",
        # The tiny model runs faster on one torch thread (RTF 0.24 vs 0.34 here), and it leaves a core
        # to Chromium's audio thread: on a busy 2-core box that is what keeps generation ahead of playback.
        "MOSS_TTS_NUM_THREADS": os.environ.get("MOSS_TTS_NUM_THREADS", "1"),
    }
    env.pop("SPACE_ID", None)
    log_path = ARTIFACTS / "app.log"
    with app_process(app_command(data_dir), cwd=REPO_ROOT, env=env, log_path=log_path) as process:
        server = AppServer(url=f"http://127.0.0.1:{port}/", process=process, log_path=log_path)
        wait_until_ready(server, STARTUP_TIMEOUT_S)
        yield server


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """test-artifacts/ (gitignored): app log, screenshots, downloads."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium through Playwright's own driver (never `playwright install`)."""
    if not os.path.exists(CHROMIUM):
        browser_unavailable(f"{CHROMIUM} not found: install Debian's chromium package to run the browser tests")
    sync_api = playwright_sync_api()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_context(browser, request):
    """A fresh context per test; a screenshot of every page is kept under test-artifacts/."""
    context = browser.new_context(viewport={"width": 1360, "height": 1000}, accept_downloads=True)
    errors: list[str] = []
    context.on("page", lambda page: page.on("pageerror", lambda exc: errors.append(str(exc))))
    # Nothing may leave the machine, and no page asset may be missing (API errors are tested apart).
    context.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "data:", "blob:"))
               else errors.append(f"external request {r.url}"))
    # /health answers 503 by design until the model serves (the player reads its JSON either way).
    context.on("response", lambda r: errors.append(f"HTTP {r.status} for {r.url}")
               if r.status >= 400 and "/api/" not in r.url and not r.url.endswith("/health") else None)
    yield context
    name = re.sub(r"[^\w.-]+", "_", request.node.name)
    for index, page in enumerate(context.pages):
        suffix = f"-{index}" if index else ""
        try:
            page.screenshot(path=str(ARTIFACTS / f"{name}{suffix}.png"), full_page=True)
        except Exception as exc:  # a screenshot is a convenience; never mask the test's own result
            print(f"screenshot of {name} failed: {exc}")
    context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"
