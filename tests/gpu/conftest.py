"""Tests that need CUDA (skipped without it; run on the GPU machine as tests/README.md says).
Every test here is marked `gpu`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.folders import mark_folder

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE, pytest.mark.gpu)
