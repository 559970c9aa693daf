"""CI's "nothing may skip" switch: without a browser the browser tests skip on a developer's
machine, and fail when MOSS_TTS_REQUIRE_BROWSER is set (`.ci/run` sets it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.e2e_helpers import REQUIRE_BROWSER, browser_unavailable

from tts_core.env import parse_flag

CI_RUN = Path(__file__).resolve().parents[2] / ".ci" / "run"


def test_a_missing_browser_skips_by_default(monkeypatch):
    monkeypatch.delenv(REQUIRE_BROWSER, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no chromium here"):
        browser_unavailable("no chromium here")


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_a_missing_browser_fails_when_required(monkeypatch, value):
    monkeypatch.setenv(REQUIRE_BROWSER, value)
    with pytest.raises(pytest.fail.Exception, match=f"no chromium here; {REQUIRE_BROWSER} is set"):
        browser_unavailable("no chromium here")


def test_ci_requires_the_browser_and_the_parity_data():
    exported = next(line for line in CI_RUN.read_text().splitlines() if line.startswith("export "))
    values = dict(item.split("=", 1) for item in exported.removeprefix("export ").split())
    assert parse_flag("MOSS_TTS_REQUIRE_PARITY", values.get("MOSS_TTS_REQUIRE_PARITY"))
    assert parse_flag(REQUIRE_BROWSER, values.get(REQUIRE_BROWSER))
