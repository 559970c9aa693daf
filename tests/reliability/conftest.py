"""Hostile clients and limits: slow and abusive connections, oversized bodies, decode bombs,
disk and log bounds, fuzzing. Every test here is marked `slow`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.folders import mark_folder
from support.reliability_helpers import (  # noqa: F401  (fixtures)
    app_proc,
    clip_wav,
    figures,
    file_server,
    gradio_dir,
    inproc,
    inproc_client,
)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE)
