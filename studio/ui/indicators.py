"""Status marks for the page's messages: a shape and a colour (ui.css `.ind-*`), never an emoji,
which renders as a box where no emoji font is installed. The mark is an empty span: the words
beside it carry the meaning, for a screen reader too.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["ok", "busy", "warn", "bad"]  # circle, ring, triangle, square


def mark(kind: Kind) -> str:
    """The HTML of one mark, to put before the words it qualifies."""
    return f'<span class="ind ind-{kind}"></span>'
