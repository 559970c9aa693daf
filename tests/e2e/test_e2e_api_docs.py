"""`/docs` offline (issue 49, point 6), in headless Chromium: Swagger UI comes from this server.

The studio runs in-process on the tiny model (`studio_helpers.studio`).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_the_api_docs_render_from_this_server_alone(browser_context, studio):
    """/docs offline: Swagger UI's files come from this server (the context fails the test on any
    request that leaves 127.0.0.1), and it renders the API, speech route included."""
    page = browser_context.new_page()
    loaded: list[str] = []
    page.on("requestfinished", lambda r: loaded.append(r.url))
    page.goto(studio.url + "docs")
    page.wait_for_selector(".swagger-ui .info .title:has-text('MOSS-TTS-Nano Studio')", timeout=30_000)
    page.wait_for_selector(".opblock-summary-path:has-text('/v1/audio/speech')", timeout=10_000)
    assert any(url.endswith("/docs-assets/swagger-ui-bundle.js") for url in loaded), loaded
