"""Small modules with one job: no source file of the project is longer than 400 lines."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("tts_core", "static", "scripts", "bench", "tests")
SUFFIXES = {".py", ".js", ".mjs", ".css", ".html", ".sh"}
MAX_LINES = 400


def test_no_source_file_is_longer_than_400_lines():
    files = [ROOT / "app.py", *(path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*"))
                                if path.suffix in SUFFIXES and "node_modules" not in path.parts)]
    too_long = {str(path.relative_to(ROOT)): n for path in files
                if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert too_long == {}, f"split these into modules of one job each: {too_long}"
