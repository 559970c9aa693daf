"""The studio app in-process for the page's browser tests: the tiny model, the real app, and a
pacer in front of it.

Loaded as a plugin by the UI test modules (`pytest_plugins = ["support.e2e_helpers", "support.studio_helpers"]`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.pacer import Pacer
from support.server_helpers import ServerThread, tiny_synthesizer_factory

AXE = Path(__file__).resolve().parents[1] / "assets" / "axe.min.js"
DONE_STATES = "['finished', 'stopped', 'error']"


@dataclass
class Studio:
    url: str  # ends with "/"
    pacer: Pacer


@pytest.fixture(scope="session")
def studio(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    from studio.app import create_app
    from studio.service import SynthesizerService
    from studio.settings import ServerSettings

    factory = tiny_synthesizer_factory(data_dir, tmp_path_factory.mktemp("voice_cache"), warmup=True)

    service = SynthesizerService(factory)
    service.start(background=False)
    assert service.wait(0), f"tiny model failed to load: {service.error}"
    settings = ServerSettings()
    app = create_app(service, settings)
    pacer = Pacer(app)
    try:
        with ServerThread(pacer) as server:
            yield Studio(url=server.url + "/", pacer=pacer)
    finally:
        service.close()


@pytest.fixture
def paced(studio: Studio):
    """Set `studio.pacer.rtf` in the test; it is reset afterwards."""
    yield studio.pacer
    studio.pacer.rtf = None


def open_page(context, url: str, *, ready: bool = True):
    page = context.new_page()
    page.goto(url)
    if ready:
        page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
        page.wait_for_function("document.querySelector('#voice-select input')?.value", timeout=10_000)
    frame = player_frame(page)
    frame.wait_for_function("window.playerStats && window.playerStats.workletLoaded", timeout=10_000)
    return page, frame


def player_frame(page):
    # Polled through Playwright (wait_for_timeout lets its events in; a bare sleep would not), for up
    # to 600 polls: a loaded CI machine can take a while to attach and navigate the iframe.
    handle = page.wait_for_selector("#moss-player", state="attached")
    for _ in range(600):
        frame = handle.content_frame()
        if frame is not None and re.search(r"/player/studio/player\.html", frame.url):
            break
        page.wait_for_timeout(50)
    else:
        raise AssertionError("player iframe did not load")
    frame.wait_for_load_state()
    return frame


def player_stats(frame) -> dict:
    return frame.evaluate("JSON.parse(JSON.stringify(window.playerStats))")


def wait_done(frame, timeout_ms: int = 60_000) -> dict:
    frame.wait_for_function(f"{DONE_STATES}.includes(window.playerStats.state)", timeout=timeout_ms)
    return player_stats(frame)


def wait_runs(frame, runs: int, timeout_ms: int = 60_000) -> dict:
    """Wait until the player's `runs`-th run has settled."""
    frame.wait_for_function(f"window.playerStats.runs >= {runs} && {DONE_STATES}.includes(window.playerStats.state)",
                            timeout=timeout_ms)
    return player_stats(frame)


def set_max_seconds(page, seconds: float) -> None:
    page.locator("#advanced").get_by_role("button", name=re.compile("Advanced sampling")).click()
    box = page.locator("#max-seconds input[type=number]")
    box.wait_for(state="visible")
    moved = f"Number(document.querySelector('#max-seconds input[type=range]').value) === {seconds}"
    for _ in range(3):
        box.fill(str(seconds))
        box.press("Enter")
        box.blur()
        try:
            page.wait_for_function(moved, timeout=3_000)
        except Exception:  # the accordion may still be rendering on the first try
            continue
        settle(page)
        return
    raise AssertionError(f"could not set the maximum length to {seconds} s")


def settle(page) -> None:
    """Two animation frames: Gradio copies a component's new value into the state its events send
    in an effect after the DOM update; a click right after the DOM changed could still send the old one."""
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def fix_seed(page, seed: int) -> None:
    """Advanced sampling (already open) → a fixed seed."""
    box = page.locator("#random-seed input[type=checkbox]")
    if box.is_checked():
        box.uncheck()
    page.fill("#seed input", str(seed))
    page.locator("#seed input").blur()
    settle(page)


def stream_requests(page) -> list:
    """Every request the page or its player makes from now on (the player is same-origin: one list)."""
    seen: list = []
    page.context.on("request", lambda r: seen.append(r))
    return seen


def shot(page, artifacts_dir, name: str) -> None:
    page.screenshot(path=str(artifacts_dir / f"ui-{name}.png"))


def axe_serious(frame_or_page) -> list[dict]:
    """axe-core's serious and critical WCAG 2.1 A/AA violations in this document (iframes apart)."""
    if not frame_or_page.evaluate("!!window.axe"):
        frame_or_page.add_script_tag(content=AXE.read_text())
    return frame_or_page.evaluate("""async () => {
      const r = await axe.run(document, {iframes: false,
        runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}});
      return r.violations.filter((v) => ['serious', 'critical'].includes(v.impact)).map((v) => ({
        id: v.id, impact: v.impact,
        nodes: v.nodes.slice(0, 5).map((n) => `${n.target.join(' ')}: ${(n.any[0] || {}).message || ''}`)}));
    }""")


# The contrast of every visible text element against what is really behind it (the first opaque
# background up the tree; the page's own colour for the player's root), by WCAG's formula.
CONTRAST = """
() => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const [r, g, b, a = 1] = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return {r, g, b, a}; };
  const lum = ({r, g, b}) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const bg = (el) => { for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a >= 0.99) return c; } return {r: 255, g: 255, b: 255, a: 1}; };
  const blend = (fg, back) => ({r: fg.r * fg.a + back.r * (1 - fg.a), g: fg.g * fg.a + back.g * (1 - fg.a),
    b: fg.b * fg.a + back.b * (1 - fg.a)});
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    if (!el.offsetParent && getComputedStyle(el).position !== 'fixed') continue;
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || el.closest('[hidden]')) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || Number(style.opacity) === 0) continue;
    const back = bg(el), fg = blend(parse(style.color), back);
    const [hi, lo] = [lum(fg), lum(back)].sort((a, b) => b - a);
    out.push({text: el.textContent.trim().slice(0, 30), id: el.id, ratio: (hi + 0.05) / (lo + 0.05),
              disabled: !!el.closest('button:disabled, [aria-disabled=true]')});
  }
  return out;
}
"""


def low_contrast(frame_or_page, minimum: float = 4.5) -> list[dict]:
    """Visible text below `minimum`:1 (disabled controls are exempt in WCAG, and skipped)."""
    return [e for e in frame_or_page.evaluate(CONTRAST) if e["ratio"] < minimum and not e["disabled"]]
