"""Folder-wide marks (each test folder's conftest marks what the folder holds), where the shared
data lives, and the environment of a child `python` that imports this checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def mark_folder(items: list[pytest.Item], folder: Path, *marks: pytest.MarkDecorator) -> None:
    """Add `marks` to every collected test under `folder` (a conftest's own directory)."""
    for item in items:
        if folder in Path(item.path).parents:
            for mark in marks:
                item.add_marker(mark)


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH (and `extra`), for a
    child `python SCRIPT` that imports tts_core / studio: a script's own folder is what Python
    puts on its path, not the working directory."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def parity_root() -> Path:
    """The shared data folder: MOSS_TTS_PARITY_DIR, else ../shared/moss_tts_nano_data beside the repo."""
    configured = os.environ.get("MOSS_TTS_PARITY_DIR")
    if configured:
        return Path(configured).resolve()
    return (REPO_ROOT / ".." / "shared" / "moss_tts_nano_data").resolve()
