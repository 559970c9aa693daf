"""The Gradio page: `build_ui` lays it out (`layout.py`) and wires its events to `handlers.py`."""

from __future__ import annotations

import gradio as gr

from ..api.requests import UploadStore
from ..api.voices_api import SavedVoices
from ..service import SynthesizerService
from ..settings import ServerSettings
from ..zerogpu.page import wire_relay
from ..zerogpu.relay import PageRelay
from .handlers import PageHandlers, speed_supported
from .indicators import mark
from .layout import Widgets, build_layout
from .marks import MARKS_JS

# One-line JS snippets; everything else lives in static/gradio/bridge.js and static/studio/player.js.
_JS_ARM = "() => { window.mossTTS && window.mossTTS.arm(); }"
_JS_PLAY = "(p) => { window.mossTTS && window.mossTTS.play(p); }"
_JS_STOP = "() => { window.mossTTS && window.mossTTS.stop(); }"
_JS_OPTIONS = "(m) => { window.mossTTS && window.mossTTS.options({matchLoudness: !!m}); }"
# The Speak tab's star and note, written to this browser's marks (bridge.js), then the pickers relabelled.
_JS_SET_STAR = "async (v, star) => { if (v && window.mossTTS) await window.mossTTS.setMark(v, {star: !!star}); }"
_JS_SET_NOTE = "async (v, note) => { if (v && window.mossTTS) await window.mossTTS.setMark(v, {note: note || ''}); }"
# Events the page uses internally: no progress overlay, not part of the public API (/docs has that).
_HIDDEN = {"show_progress": "hidden", "api_visibility": "private"}


def _count_js(limit: int) -> str:
    """The character count under the text box; over the limit it says what will happen (no silent cut)."""
    return ("(t) => { const n = (t || '').length; return n <= " + str(limit) + " ? `${n} / " + str(limit)
            + " characters` : `" + mark('warn') + " ${n.toLocaleString()} / " + f"{limit:,}"
            + " characters: too long. Only the first part, up to the last sentence that fits, will be "
              "spoken.`; }")


def build_ui(service: SynthesizerService, settings: ServerSettings, uploads: UploadStore,
             relay: PageRelay | None = None, saved: SavedVoices | None = None) -> gr.Blocks:
    """The studio page. Voices appear once the model has loaded (a timer polls the service).
    With a ZeroGPU `relay`, the audio comes through Gradio events instead (`ui/zerogpu.py`)."""
    # "My voices" lists the library folder on every call, so the API's saves show at once
    handlers = PageHandlers(service, settings, uploads, saved or SavedVoices(service, settings))
    demo, widgets = build_layout(settings, status=handlers.status, speed=speed_supported())
    with demo:
        prepared = _wire(demo, widgets, handlers, play=relay is None)
    if relay is not None:
        wire_relay(demo, widgets, prepared, relay)
    return demo


def _wire(demo: gr.Blocks, w: Widgets, handlers: PageHandlers, *, play: bool = True) -> list:
    """Wire the page's events; returns the events that leave a checked request in `w.payload`."""
    pickers = [w.status, w.voice, w.audition_voices, w.language, w.clip, w.timer, w.saved_tab, w.saved_voice, w.marks,
               w.generate_btn, w.audition_btn]
    demo.load(handlers.refresh, outputs=pickers, **_HIDDEN)
    w.timer.tick(handlers.refresh, outputs=pickers, **_HIDDEN)
    for tab in w.mode_tabs:  # a message is about the tab it came from: it goes when another is opened
        tab.select(lambda: "", outputs=w.message, **_HIDDEN)
    w.text.change(None, inputs=w.text, outputs=w.char_count, js=_count_js(handlers.settings.max_text_chars),
                  **_HIDDEN)
    w.language.change(handlers.filter_language, inputs=[w.marks, w.language, w.voice], outputs=[w.voice, w.clip],
                      js=MARKS_JS, **_HIDDEN)
    w.voice.change(handlers.clip, inputs=w.voice, outputs=w.clip, **_HIDDEN)
    for index, button in enumerate(w.examples):
        button.click(lambda marks, voice, i=index: handlers.use_example(i, voice, marks), inputs=[w.marks, w.voice],
                     outputs=[w.text, w.voice, w.language, w.clip], js=MARKS_JS, queue=False, **_HIDDEN)
    w.preset_tab.select(lambda: "preset", outputs=w.source, **_HIDDEN)
    w.saved_tab.select(lambda: "saved", outputs=w.source, **_HIDDEN)
    w.saved_tab.select(handlers.saved_picker, inputs=[w.marks, w.saved_voice], outputs=w.saved_voice, js=MARKS_JS,
                       **_HIDDEN)
    _wire_marks(w, handlers)
    w.clone_tab.select(lambda: "clone", outputs=w.source, **_HIDDEN)
    _wire_library(w, handlers)
    w.ref_audio.change(handlers.describe_upload, inputs=w.ref_audio, outputs=w.ref_info, **_HIDDEN)
    w.ref_audio.change(handlers.check_clip, inputs=w.ref_audio,
                       outputs=[w.clip_view, w.clip_check, w.clip_start, w.clip_end], **_HIDDEN)
    for box in (w.clip_start, w.clip_end, w.clip_use_window):
        box.change(handlers.redraw_clip, inputs=[w.clip_view, w.clip_start, w.clip_end, w.clip_use_window],
                   outputs=w.clip_check, **_HIDDEN)

    # Validation is quick: run it outside Gradio's queue, so the wait there is not added to the
    # time to first audio.
    speak_inputs = [w.text, w.voice, w.source, w.saved_voice, w.ref_audio, w.ref_text, *w.sampling, w.seed,
                    w.random_seed, w.max_seconds, w.clip_view, w.clip_start, w.clip_end, w.clip_use_window,
                    *([w.speed] if w.speed is not None else [])]
    w.generate_btn.click(None, js=_JS_ARM, **_HIDDEN)
    speak = w.generate_btn.click(
        handlers.prepare_speak, inputs=speak_inputs, outputs=[w.payload, w.message, w.seed], queue=False, **_HIDDEN,
    )
    w.audition_btn.click(None, js=_JS_ARM, **_HIDDEN)
    audition = w.audition_btn.click(
        handlers.prepare_audition,
        inputs=[w.audition_text, w.audition_voices, *w.sampling, w.seed, w.random_seed, w.max_seconds,
                w.audition_blind, w.audition_takes],
        outputs=[w.payload, w.message, w.seed], queue=False, **_HIDDEN,
    )
    if play:  # the player fetches the stream itself (in ZeroGPU mode `ui/zerogpu.py` feeds it)
        for event in (speak, audition):
            event.then(None, inputs=w.payload, js=_JS_PLAY, queue=False, **_HIDDEN)
    w.stop_btn.click(None, js=_JS_STOP, **_HIDDEN)
    w.match_loudness.change(None, inputs=w.match_loudness, js=_JS_OPTIONS, **_HIDDEN)
    return [speak, audition]


# Deleting asks first (a browser confirm); declined, the handler gets no voice and does nothing.
_JS_CONFIRM_DELETE = ("async (m, v) => { const ok = v && confirm('Delete this saved voice? It cannot be undone.'); "
                      "const marks = window.mossTTS && window.mossTTS.marks ? await window.mossTTS.marks() : ''; "
                      "return [marks, ok ? v : null]; }")


def _wire_library(w: Widgets, handlers: PageHandlers) -> None:
    """Save the clone tab's clip as a named voice, and delete one under "My voices" (the server's
    voice library, the same one as POST/DELETE /v1/audio/voices)."""
    w.save_btn.click(
        handlers.save_voice,
        inputs=[w.marks, w.save_name, w.ref_audio, w.ref_text, w.clip_view, w.clip_start, w.clip_end,
                w.clip_use_window],
        outputs=[w.message, w.saved_tab, w.saved_voice, w.save_name], js=MARKS_JS, **_HIDDEN)
    # "always_last": a click while the one before is still answered (a declined confirm included)
    # runs after it, instead of being dropped as Gradio's default ("once") would.
    w.delete_btn.click(handlers.delete_voice, inputs=[w.marks, w.saved_voice], outputs=[w.message, w.saved_voice],
                       js=_JS_CONFIRM_DELETE, trigger_mode="always_last", **_HIDDEN)


def _wire_marks(w: Widgets, handlers: PageHandlers) -> None:
    """The visitor's favourites and notes (`ui/marks.py`): the pickers are labelled with them once
    filled (the marks box changes) and whenever they change: in the editors under the Speak tab's
    pickers, or on an audition card (the player writes them; bridge.js presses `marks_sync`)."""
    relabel = {"fn": handlers.relabel, "inputs": [w.marks, w.language, w.voice, w.saved_voice],
               "outputs": [w.voice, w.audition_voices, w.saved_voice, w.voice_star, w.voice_note, w.saved_star,
                           w.saved_note], "js": MARKS_JS, "queue": False, **_HIDDEN}
    w.marks.change(**relabel)
    w.marks_sync.click(**relabel)
    for picker, star, note in ((w.voice, w.voice_star, w.voice_note), (w.saved_voice, w.saved_star, w.saved_note)):
        picker.change(handlers.mark_fields, inputs=[w.marks, picker], outputs=[star, note], js=MARKS_JS, queue=False,
                      **_HIDDEN)
        star.input(None, inputs=[picker, star], js=_JS_SET_STAR, **_HIDDEN).then(**relabel)
        for event in (note.blur, note.submit):
            event(None, inputs=[picker, note], js=_JS_SET_NOTE, **_HIDDEN).then(**relabel)
