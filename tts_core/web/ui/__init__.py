"""The Gradio page: `build_ui` lays it out (`layout.py`) and wires its events to `handlers.py`."""

from __future__ import annotations

import gradio as gr

from ..requests import UploadStore
from ..service import SynthesizerService
from ..settings import ServerSettings
from ..zerogpu import PageRelay
from .handlers import PageHandlers
from .layout import Widgets, build_layout
from .zerogpu import wire_relay

# One-line JS snippets; everything else lives in static/bridge.js and static/player.js.
_JS_ARM = "() => { window.mossTTS && window.mossTTS.arm(); }"
_JS_PLAY = "(p) => { window.mossTTS && window.mossTTS.play(p); }"
_JS_STOP = "() => { window.mossTTS && window.mossTTS.stop(); }"
# Events the page uses internally: no progress overlay, not part of the public API (/docs has that).
_HIDDEN = {"show_progress": "hidden", "api_visibility": "private"}


def build_ui(service: SynthesizerService, settings: ServerSettings, uploads: UploadStore,
             relay: PageRelay | None = None) -> gr.Blocks:
    """The studio page. Voices appear once the model has loaded (a timer polls the service).
    With a ZeroGPU `relay`, the audio comes through Gradio events instead (`ui/zerogpu.py`)."""
    handlers = PageHandlers(service, settings, uploads)
    demo, widgets = build_layout(settings, status=handlers.status)
    with demo:
        prepared = _wire(demo, widgets, handlers, settings, play=relay is None)
    if relay is not None:
        wire_relay(demo, widgets, prepared, relay)
    return demo


def _wire(demo: gr.Blocks, w: Widgets, handlers: PageHandlers, settings: ServerSettings, *, play: bool = True) -> list:
    """Wire the page's events; returns the events that leave a checked request in `w.payload`."""
    pickers = [w.status, w.voice, w.audition_voices, w.language, w.clip, w.timer]
    count_js = "(t) => `${(t || '').length} / " + str(settings.max_text_chars) + " characters`"
    demo.load(handlers.refresh, outputs=pickers, **_HIDDEN)
    w.timer.tick(handlers.refresh, outputs=pickers, **_HIDDEN)
    w.text.change(None, inputs=w.text, outputs=w.char_count, js=count_js, **_HIDDEN)
    w.language.change(handlers.filter_language, inputs=[w.language, w.voice], outputs=[w.voice, w.clip], **_HIDDEN)
    w.voice.change(handlers.clip, inputs=w.voice, outputs=w.clip, **_HIDDEN)
    w.preset_tab.select(lambda: "preset", outputs=w.source, **_HIDDEN)
    w.clone_tab.select(lambda: "clone", outputs=w.source, **_HIDDEN)
    w.ref_audio.change(handlers.describe_upload, inputs=w.ref_audio, outputs=w.ref_info, **_HIDDEN)

    # Validation is quick: run it outside Gradio's queue (saves ~120 ms of time to first audio).
    w.generate_btn.click(None, js=_JS_ARM, **_HIDDEN)
    speak = w.generate_btn.click(
        handlers.prepare_speak,
        inputs=[w.text, w.voice, w.source, w.ref_audio, w.ref_text, *w.sampling, w.seed, w.random_seed,
                w.max_seconds],
        outputs=[w.payload, w.message, w.seed], queue=False, **_HIDDEN,
    )
    w.audition_btn.click(None, js=_JS_ARM, **_HIDDEN)
    audition = w.audition_btn.click(
        handlers.prepare_audition,
        inputs=[w.audition_text, w.audition_voices, *w.sampling, w.seed, w.random_seed, w.max_seconds],
        outputs=[w.payload, w.message, w.seed], queue=False, **_HIDDEN,
    )
    if play:  # the player fetches the stream itself (in ZeroGPU mode `ui/zerogpu.py` feeds it)
        for event in (speak, audition):
            event.then(None, inputs=w.payload, js=_JS_PLAY, queue=False, **_HIDDEN)
    w.stop_btn.click(None, js=_JS_STOP, **_HIDDEN)
    return [speak, audition]
