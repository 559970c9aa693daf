"""Every text colour of the player's two palettes reads at WCAG AA (4.5:1) on every surface it can sit on.

The browser tests run axe on whatever the page shows, so a colour used only in some states (the amber
'warn' figure appears when a stream's RTF lands in 0.8-1.0, which depends on the machine's speed) is
checked there only when that state happens. This test checks the palettes themselves, on any machine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = Path(__file__).resolve().parents[2] / "static" / "studio" / "player.css"
TEXT = ("fg", "muted", "good", "warn", "bad")  # colours used for text on the page and on cards
SURFACES = ("bg", "card")
PAIRS = (("on-accent", "accent"), ("on-mark", "mark"))  # text colour, its own background


def _channel(c: int) -> float:
    s = c / 255
    return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4


def luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return 0.2126 * _channel(r) + 0.7152 * _channel(g) + 0.0722 * _channel(b)


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def palettes() -> dict[str, dict[str, str]]:
    """The custom properties of each palette block in player.css, keyed by its selector."""
    css = re.sub(r"/\*.*?\*/", "", CSS.read_text(encoding="utf-8"), flags=re.S)
    css = re.sub(r"@media[^{]*\{", "", css)  # the system-dark block's own selector names it
    return {
        " ".join(selector.split()): dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", body))
        for selector, body in re.findall(r"([^{}]+)\{([^{}]*--bg:[^{}]*)\}", css)
    }


def test_the_css_has_a_light_and_a_dark_palette_with_every_colour():
    found = palettes()
    assert len(found) == 3, found.keys()  # light, dark by data-theme, dark by the system
    for name, colours in found.items():
        assert set(TEXT + SURFACES) <= colours.keys(), name
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)


@pytest.mark.parametrize("selector", sorted(palettes()))
def test_every_text_colour_reaches_4_5_to_1_on_page_and_card(selector):
    colours = palettes()[selector]
    light = next(iter(palettes().values()))  # :root's own values hold wherever a block sets none
    full = {**light, **colours}
    low = [
        f"--{t} on --{s}: {contrast(full[t], full[s]):.2f}"
        for t in TEXT
        for s in SURFACES
        if contrast(full[t], full[s]) < 4.5
    ]
    low += [f"--{t} on --{s}: {contrast(full[t], full[s]):.2f}" for t, s in PAIRS if contrast(full[t], full[s]) < 4.5]
    assert low == [], f"{selector}: {low}"
