"""The static in-browser build ships every player module its player files import (a worklet whose
import is missing fails to load, and the page plays nothing)."""

from __future__ import annotations

import posixpath
import re

from tts_core.export.web import PLAYER_FILES, STATIC

IMPORT = re.compile(r"""^\s*(?:import|export)\s[^'"]*?\bfrom\s*['"](\.{1,2}/[\w./-]+\.js)['"]""", re.M)


def imports(name: str) -> list[str]:
    """The static/-relative paths of the modules `name` (a static/-relative path) imports."""
    folder = posixpath.dirname(name)
    return [posixpath.normpath(posixpath.join(folder, spec))
            for spec in IMPORT.findall((STATIC / name).read_text(encoding="utf-8"))]


def test_the_static_build_ships_what_its_player_files_import() -> None:
    missing = {}
    for name in (n for n in PLAYER_FILES if n.endswith(".js")):
        missing.update({f"{name} -> {w}": w for w in imports(name) if w not in PLAYER_FILES})
    assert not missing, f"add to tts_core/export/web.py PLAYER_FILES: {sorted(missing)}"
    assert "player/gainglide.js" in imports("player/worklet.js")
    page = imports("engine/page.js")
    assert {w for w in page if not w.startswith("engine/")} <= set(PLAYER_FILES), page
