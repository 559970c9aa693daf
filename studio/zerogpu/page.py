"""ZeroGPU mode on the page: the one place the page differs (see `studio.zerogpu.relay`).

Instead of the player fetching POST /api/tts/stream (this process's CPU engine), a click runs a
Gradio event whose generator makes the audio in GPU calls; its relay messages land in a hidden
textbox, and each update is handed to static/zerogpu/bridge-zerogpu.js, which forwards it to the player,
and to static/zerogpu/zerogpu-notice.js, which shows the GPU time each call asks for and, when ZeroGPU
refuses (quota out) or has no GPU, says so and offers the server's CPU engine instead.
"""

from __future__ import annotations

import hashlib

import gradio as gr

from ..ui.layout import Widgets
from .quota import Visitor
from .relay import PageRelay

_JS_ARM = "() => { window.mossZeroGPU && window.mossZeroGPU.arm(); }"
_JS_PUSH = ("(m) => { window.mossZeroGPU && window.mossZeroGPU.push(m); "
            "window.mossZeroGPUNotice && window.mossZeroGPUNotice.see(m); }")
_HIDDEN = {"show_progress": "hidden", "api_visibility": "private"}
RELAY_ELEM_ID = "zerogpu-relay"


def visitor_of(request: gr.Request | None) -> Visitor:
    """Whom the harness charges: ZeroGPU's per-visitor token when the proxy sends one (X-IP-Token),
    else the client's address; hashed, so no address is kept. (On a Space `spaces` does this.)"""
    headers = getattr(request, "headers", None) or {}
    client = getattr(getattr(request, "client", None), "host", None) or "local"
    key = headers.get("x-ip-token") or client
    return Visitor(id=hashlib.sha256(key.encode()).hexdigest()[:16])


def wire_relay(demo: gr.Blocks, w: Widgets, prepared: list, relay: PageRelay) -> None:
    """After each of the `prepared` events (they leave the checked request in `w.payload`), run the
    relay; Stop cancels it (closing the GPU generator, which stops the worker's job)."""

    def run(payload_json: str | None, request: gr.Request):
        yield from relay.relay(payload_json, visitor_of(request))

    with demo:
        box = gr.Textbox(visible=False, elem_id=RELAY_ELEM_ID)
        for button in (w.generate_btn, w.audition_btn):
            button.click(None, js=_JS_ARM, **_HIDDEN)
        runs = [event.then(run, inputs=w.payload, outputs=box, concurrency_limit=relay.concurrency,
                           concurrency_id="zerogpu", **_HIDDEN) for event in prepared]
        box.change(None, inputs=box, js=_JS_PUSH, queue=False, **_HIDDEN)
        w.stop_btn.click(None, cancels=runs, **_HIDDEN)
