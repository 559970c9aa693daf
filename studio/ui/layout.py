"""The studio page's layout, mobile first: the form (text, voice, the tab's one primary action) and
the AudioWorklet player (an iframe) side by side on a desktop, one above the other on a phone;
examples next to the text box; sampling and tips below.

Only components here; what they do is wired in `ui/__init__.py` to `ui/handlers.py`. The e2e
tests and static/gradio/bridge.js find components by their `elem_id`s: keep them stable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from tts_core.config import SamplingParams

from ..api.browser_build import engine_choice_html
from ..settings import ServerSettings
from .examples import DEFAULT_TEXT, EXAMPLES
from .handlers import FIXED_LANGUAGES, MAX_AUDITION_VOICES
from .marks import NOTE_MAX

_DEFAULTS = SamplingParams()
_TIPS = """**Tips**
- **Ctrl/Cmd + Enter** generates, **Esc** stops. The player starts as soon as the rest can play
  through without a gap (at once when generation is fast). **TTFP** is the time from your click to
  the first sound; **RTF** is generation time ÷ audio length (below 1 = faster than real time).
- 3-10 s of clean, single-speaker speech clones best. Same seed + same settings = the same audio.
- Downloads (MP3, FLAC, 16-bit WAV) and your history stay available for a while; *Use from code*
  in the player shows the same request for `curl` and the Python `openai` client.
- Scripts can use the OpenAI-compatible `POST /v1/audio/speech` (raw PCM, WAV, FLAC, MP3, Opus, AAC)
  or the player's `POST /api/tts/stream`; [the API docs](/docs) list every field."""
# One typeface across the page and the player (static/studio/player.css has the same stack): the
# system's UI font, so nothing is downloaded and no webfont's alternate glyphs ("Ɛnglish") show.
FONT_STACK = ("system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif")
MONO_STACK = ("ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace")
_PLAYER_IFRAME = ('<iframe id="moss-player" src="/player/studio/player.html?embed=1" allow="autoplay; clipboard-write" '
                  'title="Streaming audio player"></iframe>')


def page_theme() -> gr.themes.Base:
    """The page's Gradio theme: Soft's colours with the system font stack (no webfont, no CDN)."""
    return gr.themes.Soft(font=list(FONT_STACK), font_mono=list(MONO_STACK))


@dataclass(frozen=True, slots=True)
class Widgets:
    """The components that events read or write."""

    status: gr.Markdown
    timer: gr.Timer
    mode_tabs: tuple  # Speak, Voice audition
    payload: gr.Textbox
    marks: gr.Textbox
    marks_sync: gr.Button
    source: gr.State
    text: gr.Textbox
    char_count: gr.Markdown
    examples: tuple
    preset_tab: gr.Tab
    language: gr.Radio
    voice: gr.Dropdown
    clip: gr.HTML
    voice_star: gr.Checkbox
    voice_note: gr.Textbox
    saved_tab: gr.Tab
    saved_voice: gr.Dropdown
    saved_star: gr.Checkbox
    saved_note: gr.Textbox
    delete_btn: gr.Button
    clone_tab: gr.Tab
    ref_audio: gr.Audio
    ref_info: gr.Markdown
    ref_text: gr.Textbox
    clip_check: gr.HTML
    clip_start: gr.Number
    clip_end: gr.Number
    clip_use_window: gr.Checkbox
    clip_view: gr.State
    save_name: gr.Textbox
    save_btn: gr.Button
    speed: gr.Slider | None
    generate_btn: gr.Button
    stop_btn: gr.Button
    audition_text: gr.Textbox
    audition_voices: gr.CheckboxGroup
    audition_takes: gr.Number
    audition_blind: gr.Checkbox
    match_loudness: gr.Checkbox
    audition_btn: gr.Button
    do_sample: gr.Checkbox
    audio_temperature: gr.Slider
    audio_top_p: gr.Slider
    audio_top_k: gr.Slider
    repetition_penalty: gr.Slider
    text_temperature: gr.Slider
    seed: gr.Number
    random_seed: gr.Checkbox
    max_seconds: gr.Slider
    message: gr.Markdown

    @property
    def sampling(self) -> list:
        return [self.do_sample, self.audio_temperature, self.audio_top_p, self.audio_top_k,
                self.repetition_penalty, self.text_temperature]


def build_layout(settings: ServerSettings, status: Callable[[], str], *,
                 speed: bool = False) -> tuple[gr.Blocks, Widgets]:
    """The page's Blocks and its components; `status` gives the model status line on each page load;
    `speed`: offer the speed slider (the server's stream route takes `speed`)."""
    parts: dict = {}
    with gr.Blocks(title="MOSS-TTS-Nano Studio") as demo:
        with gr.Row(elem_id="header"):
            gr.Markdown("# MOSS-TTS-Nano Studio\n<p class='subtitle'>Streaming text-to-speech, 48 kHz stereo, "
                        "20 languages, voice cloning from a short clip.</p>")
            parts["status"] = gr.Markdown(status, elem_id="model-status")
        if settings.browser_build:
            gr.HTML(engine_choice_html(), elem_id="engine-choice-row")
        parts["timer"] = gr.Timer(1.0)
        parts["payload"] = gr.Textbox(visible=False, elem_id="tts-payload")
        # The visitor's favourites and notes live in the browser (static/studio/voicemarks.js): events read them
        # there (ui/marks.py MARKS_JS); this box only carries them in, and the button out of sight
        # (ui.css) is pressed by bridge.js when an audition card changed them.
        parts["marks"] = gr.Textbox(visible=False, elem_id="voice-marks")
        parts["marks_sync"] = gr.Button("Update voice marks", elem_id="voice-marks-sync")
        parts["source"] = gr.State("preset")
        with gr.Row(equal_height=False, elem_id="main-row"):
            with gr.Column(scale=3, min_width=300, elem_id="form-column"), gr.Tabs(elem_id="mode-tabs"):
                with gr.Tab("Speak", id="speak") as speak_tab:
                    parts |= _speak_tab(settings, speed)
                with gr.Tab("Voice audition", id="audition") as audition_tab:
                    parts |= _audition_tab(settings)
                parts["mode_tabs"] = (speak_tab, audition_tab)
            with gr.Column(scale=2, min_width=300, elem_id="player-column"):
                parts["message"] = gr.Markdown(elem_id="tts-message")
                gr.HTML(_PLAYER_IFRAME, elem_id="player-panel", js_on_load=None)
                # The visitor's one Stop is the player's. This button stays out of sight (ui.css) and
                # carries the page's stop events: the player and Esc press it (bridge.js), so server-side
                # stop handlers (a Gradio-event source's cancels=) run on every stop.
                parts["stop_btn"] = gr.Button("Stop", elem_id="stop-btn")
        with gr.Accordion("Advanced sampling", open=False, elem_id="advanced"):
            parts |= _advanced_sampling()
        gr.Markdown(_TIPS, elem_id="tips")
    return demo, Widgets(**parts)


def _speak_tab(settings: ServerSettings, speed: bool) -> dict:
    # No max_length: a browser would cut pasted text silently; the handler warns and cuts at a boundary.
    text = gr.Textbox(
        label="Text", lines=3, max_lines=12, value=DEFAULT_TEXT, elem_id="tts-text",
        placeholder="Type what to say. Long text is split into sentences and streamed.",
    )
    parts: dict = {"text": text}
    parts["char_count"] = gr.Markdown(f"{len(DEFAULT_TEXT)} / {settings.max_text_chars} characters",
                                      elem_id="char-count")
    with gr.Row(elem_id="examples-row"):
        gr.Markdown("Examples:", elem_id="examples-label")
        parts["examples"] = tuple(
            gr.Button(label, size="sm", elem_id=f"example-{i}", elem_classes=["example"])
            for i, (label, _, _) in enumerate(EXAMPLES))
    # "wrap": every voice source stays one tap away on a phone (never behind Gradio's "⋯" menu)
    with gr.Tabs(elem_id="voice-tabs", overflow_behavior="wrap"):
        with gr.Tab("Preset voice", id="preset") as preset_tab:
            parts["voice"] = gr.Dropdown(label="Voice", elem_id="voice-select",
                                         info="Voices appear when the model has loaded.")
            with gr.Accordion("Language · hear it · ★ and your note", open=False, elem_id="voice-more"):
                language = gr.Radio(FIXED_LANGUAGES, value="All", label="Language", elem_id="voice-language")
                parts["clip"] = gr.HTML("", elem_id="voice-clip", js_on_load=None)
                parts["voice_star"], parts["voice_note"] = _mark_editor("voice")
        with gr.Tab("My voices", id="saved", visible=False, elem_id="saved-tab") as saved_tab:
            parts["saved_voice"] = gr.Dropdown(label="Saved voice", elem_id="saved-voice-select",
                                               info="Voices saved from the Clone tab (or through the API), kept "
                                                    "on this server.")
            with gr.Accordion("★ and your note · delete", open=False, elem_id="saved-voice-more"):
                parts["saved_star"], parts["saved_note"] = _mark_editor("saved-voice")
                parts["delete_btn"] = gr.Button("Delete this voice", variant="stop", size="sm",
                                                elem_id="delete-voice-btn")
        with gr.Tab("Clone a voice", id="clone") as clone_tab:
            parts["ref_audio"] = gr.Audio(sources=["upload", "microphone"], type="filepath", format="wav",
                                          label="Reference clip (3-10 s of clean speech)", elem_id="ref-audio")
            parts["ref_info"] = gr.Markdown(elem_id="ref-info")
            parts |= _clip_check()
            parts["ref_text"] = gr.Textbox(
                label="Transcript of the clip (optional)", elem_id="ref-text",
                info="If given, the model continues the clip (continuation mode); "
                     "leave empty to clone the voice only.",
            )
            with gr.Row(equal_height=True, elem_id="save-voice-row"):
                parts["save_name"] = gr.Textbox(label="Save as one of my voices", elem_id="save-voice-name",
                                                placeholder="Name, e.g. Narrator", max_lines=1, scale=3, min_width=180,
                                                info="The clip (its window) and transcript, kept on this server "
                                                     "under My voices.")
                parts["save_btn"] = gr.Button("Save voice", elem_id="save-voice-btn", scale=1, min_width=110)
    with gr.Row(equal_height=True, elem_id="generate-row"):  # side by side even on a phone
        parts["speed"] = gr.Slider(0.5, 2.0, 1.0, step=0.05, label="Speed", elem_id="speed", scale=2,
                                   min_width=150) if speed else None
        parts["generate_btn"] = gr.Button("Generate", variant="primary", elem_id="generate-btn", scale=1,
                                          min_width=110)
    return parts | {"preset_tab": preset_tab, "language": language, "saved_tab": saved_tab, "clone_tab": clone_tab}


def _mark_editor(prefix: str) -> tuple[gr.Checkbox, gr.Textbox]:
    """A favourite switch and a note for the voice chosen above (kept in this browser, `ui/marks.py`)."""
    with gr.Row(equal_height=True, elem_id=f"{prefix}-marks-row"):
        star = gr.Checkbox(False, label="★ Favourite", elem_id=f"{prefix}-star", scale=0, min_width=130)
        note = gr.Textbox(label="Your note on this voice", elem_id=f"{prefix}-note", max_length=NOTE_MAX, scale=3,
                          min_width=180, placeholder="e.g. warm, good for audiobooks",
                          info="Kept in this browser; shown in the voice lists and on audition cards.")
    return star, note


def _clip_check() -> dict:
    """The clip doctor's region (filled on upload, `ui/clip_check.py`) and the window the clone uses."""
    parts: dict = {"clip_check": gr.HTML("", elem_id="clip-check", js_on_load=None), "clip_view": gr.State(None)}
    with gr.Row(equal_height=True, elem_id="clip-window-row"):
        parts["clip_start"] = gr.Number(None, label="Window start (s)", elem_id="clip-window-start", minimum=0,
                                        step=0.05, min_width=120)
        parts["clip_end"] = gr.Number(None, label="Window end (s)", elem_id="clip-window-end", minimum=0,
                                      step=0.05, min_width=120)
    parts["clip_use_window"] = gr.Checkbox(True, label="Clone from this window only (off: the whole clip)",
                                           elem_id="clip-use-window")
    return parts


def _audition_tab(settings: ServerSettings) -> dict:
    gr.Markdown("Hear one sentence in several preset voices, with the same seed; each voice keeps its own "
                "card in the player to replay or download.")
    return {
        "audition_text": gr.Textbox(label="Sentence", elem_id="audition-text",
                                    value="Hello! This is what my voice sounds like."),
        "audition_voices": gr.CheckboxGroup(label="Voices to compare", elem_id="audition-voices",
                                            info=f"Up to {MAX_AUDITION_VOICES}."),
        "audition_takes": gr.Number(1, label="Takes", minimum=1, maximum=4, precision=0, step=1,
                                    elem_id="audition-takes",
                                    info="Each voice with 1-4 seeds side by side, so a bad take is not taken for a "
                                         "bad voice; “Keep this take” pins its seed."),
        "audition_blind": gr.Checkbox(False, label="Blind", elem_id="audition-blind",
                                      info="Cards in a random order, named A, B, C…: rank them, then reveal. "
                                           "With two voices, A/B/X: tell which one X is."),
        "match_loudness": gr.Checkbox(True, label="Match loudness", elem_id="match-loudness",
                                      info="Every play at one loudness (−23 LUFS, EBU R128; the first, while it is "
                                           "made, by an estimate), so the louder voice does not sound better; "
                                           "downloads stay as generated."),
        "audition_btn": gr.Button("Compare voices", variant="primary", elem_id="audition-btn"),
    }


def _advanced_sampling() -> dict:
    parts: dict = {
        "do_sample": gr.Checkbox(True, label="Sample (off = greedy: always the most likely sound)"),
        "audio_temperature": gr.Slider(0.1, 1.5, _DEFAULTS.audio_temperature, step=0.05, label="Audio temperature",
                                       info="Higher = livelier and more varied; lower = steadier."),
        "audio_top_p": gr.Slider(0.1, 1.0, _DEFAULTS.audio_top_p, step=0.01, label="Audio top-p",
                                 info="Only the most likely sounds that add up to this share are kept."),
        "audio_top_k": gr.Slider(0, 100, _DEFAULTS.audio_top_k, step=1, label="Audio top-k",
                                 info="Choose among this many most likely sounds (0 = no limit)."),
        "repetition_penalty": gr.Slider(1.0, 2.0, _DEFAULTS.audio_repetition_penalty, step=0.05,
                                        label="Repetition penalty",
                                        info="Raise it if the voice stutters or repeats itself."),
        "text_temperature": gr.Slider(0.1, 1.5, _DEFAULTS.text_temperature, step=0.05,
                                      label="Stop-decision temperature",
                                      info="How freely the model decides when the sentence is over."),
    }
    with gr.Row():
        parts["seed"] = gr.Number(0, label="Seed", precision=0, minimum=0, elem_id="seed",
                                  info="Same seed + same settings = the same audio.")
        parts["random_seed"] = gr.Checkbox(True, label="New random seed each time", elem_id="random-seed")
    parts["max_seconds"] = gr.Slider(0, 120, 0, step=0.5, label="Maximum length (seconds)", elem_id="max-seconds",
                                     info="0 = automatic, from the text length.")
    return parts
