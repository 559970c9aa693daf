"""The app started as users start it and driven in headless Chromium (Playwright), plus the
player's modules and worklet in the browser. Every test here is marked `e2e`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.e2e_helpers import artifacts_dir, browser, browser_context, static_page  # noqa: F401
from support.folders import mark_folder
from support.studio_helpers import paced, studio  # noqa: F401  (fixtures)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE)
