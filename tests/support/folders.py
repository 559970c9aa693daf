"""Folder-wide marks (each test folder's conftest marks what the folder holds), where the shared
data lives, and the environment of a child `python` that imports this checkout."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# The marks every test of a folder carries, given by the folder's conftest (`mark_folder`).
FOLDER_MARKS = {"e2e": ("e2e",), "reliability": ("slow",), "gpu": ("gpu",)}
_NOT_NAMES = {"and", "or", "not", "True", "False"}


def mark_folder(items: list[pytest.Item], folder: Path) -> None:
    """Add the folder's marks (`FOLDER_MARKS`) to every collected test under `folder` (a conftest's
    own directory)."""
    marks = [getattr(pytest.mark, name) for name in FOLDER_MARKS[folder.name]]
    for item in items:
        if folder in Path(item.path).parents:
            for mark in marks:
                item.add_marker(mark)


def deselects_folder(markexpr: str, folder: Path) -> bool:
    """Whether `-m markexpr` deselects every test of `folder`, whatever other marks a test has:
    the expression is false with the folder's marks for every value of the other names in it."""
    from _pytest.mark.expression import Expression  # the parser `-m` itself uses

    marks = FOLDER_MARKS.get(folder.name)
    if not markexpr or marks is None:
        return False
    expression = Expression.compile(markexpr)
    others = sorted(set(re.findall(r"[A-Za-z_][\w.]*", markexpr)) - _NOT_NAMES - set(marks))
    for values in itertools.product((False, True), repeat=len(others)):
        true = set(marks) | {name for name, on in zip(others, values) if on}
        if expression.evaluate(lambda name, /, true=true, **kwargs: name in true):
            return False
    return True


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
