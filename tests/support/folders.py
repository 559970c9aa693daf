"""Folder-wide marks: each test folder's conftest marks what the folder holds."""

from __future__ import annotations

from pathlib import Path

import pytest


def mark_folder(items: list[pytest.Item], folder: Path, *marks: pytest.MarkDecorator) -> None:
    """Add `marks` to every collected test under `folder` (a conftest's own directory)."""
    for item in items:
        if folder in Path(item.path).parents:
            for mark in marks:
                item.add_marker(mark)
