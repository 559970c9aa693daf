"""The studio offers the in-browser engine: `--browser-build` serves an export-web build at
/browser with the cross-origin isolation headers, and the Gradio page's engine choice opens it,
where the model loads and speaks in the tab (real server, real Chromium)."""

from __future__ import annotations

import httpx
import pytest
from support.browser_engine_helpers import tiny_build
from support.e2e_helpers import playwright_sync_api
from support.server_helpers import ServerThread, tiny_synthesizer_factory

from studio.api.browser_build import check_build
from studio.app import create_app
from studio.service import SynthesizerService
from studio.settings import ServerSettings
from tts_core.config import EngineConfig
from tts_core.export.web import CROSS_ORIGIN_HEADERS

playwright_sync_api()


@pytest.fixture(scope="module")
def studio_url(data_dir, tmp_path_factory):
    service = SynthesizerService(tiny_synthesizer_factory(data_dir, tmp_path_factory.mktemp("cache"),
                                                          EngineConfig(max_active_streams=1)))
    settings = ServerSettings(lm_id=str(data_dir / "parity" / "tiny_lm"), codec_id=str(data_dir / "parity" / "tiny_codec"),
                              browser_build=str(tiny_build(data_dir)))
    with ServerThread(create_app(service, settings)) as server:
        yield server.url


def test_build_is_served_isolated(studio_url):
    for path in ("/browser/", "/browser/manifest.json", "/browser/engine/ort/ort-wasm-simd-threaded.wasm"):
        response = httpx.get(studio_url + path, timeout=30)
        assert response.status_code == 200, path
        for key, value in CROSS_ORIGIN_HEADERS.items():
            assert response.headers[key] == value, (path, key)
    assert "cross-origin-embedder-policy" not in httpx.get(studio_url + "/health", timeout=30).headers


def test_a_folder_without_a_build_is_refused_naming_the_flag(tmp_path):
    with pytest.raises(ValueError, match=r"--browser-build .*export-web"):
        check_build(tmp_path)


def test_page_engine_choice_opens_the_browser_engine(browser, studio_url):
    context = browser.new_context()
    errors: list[str] = []
    context.on("page", lambda p: p.on("pageerror", lambda exc: errors.append(str(exc))))
    try:
        page = context.new_page()
        page.goto(studio_url + "/")
        link = page.locator("#engine-choice a", has_text="This browser")
        link.wait_for(timeout=60_000)
        assert "Server" in page.locator("#engine-choice strong").inner_text()
        with context.expect_page() as opened:
            link.click()
        tab = opened.value
        tab.wait_for_function("window.mossTTS !== undefined", timeout=60_000)
        tab.evaluate("mossTTS.ready")
        assert tab.evaluate("crossOriginIsolated") is True
        assert tab.evaluate("mossTTS.info()")["backend"] in ("wasm", "webgpu")
        frames = tab.evaluate("""async () => { let n = 0;
          for await (const c of mossTTS.stream({text: 'Hi.', greedy: true, maxFrames: 3})) n += c.codes.length / 16;
          return n; }""")
        assert frames == 3
    finally:
        context.close()
    assert not errors, errors
