"""The app started as users start it and driven in headless Chromium (Playwright), plus the
player's modules and worklet in the browser. Every test here is marked `e2e`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.folders import mark_folder

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE, pytest.mark.e2e)
