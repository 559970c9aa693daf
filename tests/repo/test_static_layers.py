"""static/'s layers: the player component (static/player/) imports only itself, so any page can embed
it; the studio's features build on it, never the reverse (docs/ARCHITECTURE.md, static/)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "static"
MODULE = re.compile(r"""^\s*(?:import|export)\s[^'"]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]""", re.M)


def imports(path: Path) -> list[str]:
    """The static/-relative paths `path` imports (statically, or by a literal dynamic import)."""
    folder = posixpath.dirname(path.relative_to(STATIC).as_posix())
    found = [a or b for a, b in MODULE.findall(path.read_text(encoding="utf-8"))]
    return [posixpath.normpath(posixpath.join(folder, spec)) for spec in found if spec.startswith(".")]


def test_the_player_component_imports_nothing_outside_itself():
    outside = {f"player/{p.name} -> {target}" for p in sorted((STATIC / "player").glob("*.js"))
               for target in imports(p) if not target.startswith("player/")}
    assert not outside, sorted(outside)


def test_the_studio_uses_the_component_and_not_its_internals_of_the_audio_graph():
    page = imports(STATIC / "studio" / "player.js")
    assert "player/stream-player.js" in page
    assert "player/audio.js" not in page and "player/worklet.js" not in page  # through StreamPlayer only
    assert "player/stream-player.js" in imports(STATIC / "engine" / "page.js")
