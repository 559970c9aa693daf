"""A smell detector, not a target: a source file past 500 lines likely holds more than one concept.

Split such a file by concept (never to dodge the bound), and fold modules too small to be a concept
of their own back into their neighbours.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("tts_core", "studio", "static", "scripts", "bench", "tests")
SUFFIXES = {".py", ".js", ".mjs", ".css", ".html", ".sh"}
MAX_LINES = 500


def test_no_source_file_is_longer_than_500_lines():
    files = [ROOT / "app.py", *(path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*"))
                                if path.suffix in SUFFIXES and "node_modules" not in path.parts)]
    too_long = {str(path.relative_to(ROOT)): n for path in files
                if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert too_long == {}, f"these files likely hold more than one concept; split them by concept: {too_long}"
