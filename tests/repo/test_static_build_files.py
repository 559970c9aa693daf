"""The static in-browser build ships every player module its player files import (a worklet whose
import is missing fails to load, and the page plays nothing)."""

from __future__ import annotations

import re

from tts_core.export.web import PLAYER_FILES, STATIC

IMPORT = re.compile(r"""^\s*import\s[^'"]*['"]\./([\w.-]+\.js)['"]""", re.M)


def test_the_static_build_ships_what_its_player_files_import() -> None:
    missing = {}
    for name in (n for n in PLAYER_FILES if n.endswith(".js")):
        wanted = IMPORT.findall((STATIC / name).read_text(encoding="utf-8"))
        missing.update({f"{name} -> {w}": w for w in wanted if w not in PLAYER_FILES})
    assert not missing, f"add to tts_core/export/web.py PLAYER_FILES: {sorted(missing)}"
    assert "gainglide.js" in IMPORT.findall((STATIC / "worklet.js").read_text(encoding="utf-8"))
