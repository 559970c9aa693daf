"""The studio page's layout: controls on the left, the AudioWorklet player (an iframe) on the right.

Only components here; what they do is wired in `ui/__init__.py` to `ui/handlers.py`. The e2e
tests and static/bridge.js find components by their `elem_id`s: keep them stable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from ...config import SamplingParams
from ..settings import ServerSettings
from .handlers import FIXED_LANGUAGES, MAX_AUDITION_VOICES

_DEFAULTS = SamplingParams()
EXAMPLES = [
    ["今天天气很好，我们一起去公园散步吧。路上还可以买一杯热咖啡。", "Chinese"],
    ["Streaming speech starts playing while the rest of the sentence is still being generated.", "English"],
    ["こんにちは。今日はいい天気ですね。一緒に散歩に行きませんか。", "Japanese"],
    ["The quick brown fox jumps over the lazy dog. Then it takes a long nap in the afternoon sun.", "English"],
]
_TIPS = """**Tips**
- The player starts once 0.2 s of audio is buffered. **TTFP** is the time from your click to the
  first sound; **RTF** is generation time ÷ audio length (below 1 = faster than real time).
- 3-10 s of clean, single-speaker speech clones best.
- Same seed + same settings = the same audio (see *Advanced sampling*).
- Scripts can use `POST /api/tts/stream` (raw 48 kHz stereo float32) or the OpenAI-compatible
  `POST /v1/audio/speech`; [the API docs](/docs) list every field."""
_PLAYER_IFRAME = ('<iframe id="moss-player" src="/player/player.html?embed=1" allow="autoplay" '
                  'title="Streaming audio player"></iframe>')


@dataclass(frozen=True, slots=True)
class Widgets:
    """The components that events read or write."""

    status: gr.Markdown
    timer: gr.Timer
    payload: gr.Textbox
    source: gr.State
    text: gr.Textbox
    char_count: gr.Markdown
    preset_tab: gr.Tab
    language: gr.Radio
    voice: gr.Dropdown
    clip: gr.HTML
    clone_tab: gr.Tab
    ref_audio: gr.Audio
    ref_info: gr.Markdown
    ref_text: gr.Textbox
    audition_text: gr.Textbox
    audition_voices: gr.CheckboxGroup
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
    generate_btn: gr.Button
    stop_btn: gr.Button
    message: gr.Markdown

    @property
    def sampling(self) -> list:
        return [self.do_sample, self.audio_temperature, self.audio_top_p, self.audio_top_k,
                self.repetition_penalty, self.text_temperature]


def build_layout(settings: ServerSettings, status: Callable[[], str]) -> tuple[gr.Blocks, Widgets]:
    """The page's Blocks and its components; `status` gives the model status line on each page load."""
    parts: dict = {}
    with gr.Blocks(title="MOSS-TTS-Nano Studio") as demo:
        with gr.Row(elem_id="header"):
            gr.Markdown("# MOSS-TTS-Nano Studio\nStreaming text-to-speech, 48 kHz stereo, "
                        "20 languages, voice cloning from a short clip.")
            parts["status"] = gr.Markdown(status, elem_id="model-status")
        parts["timer"] = gr.Timer(1.0)
        parts["payload"] = gr.Textbox(visible=False, elem_id="tts-payload")
        parts["source"] = gr.State("preset")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                with gr.Tabs():
                    with gr.Tab("Speak", id="speak"):
                        parts |= _speak_tab(settings)
                    with gr.Tab("Voice audition", id="audition"):
                        parts |= _audition_tab(settings)
                with gr.Accordion("Advanced sampling", open=False, elem_id="advanced"):
                    parts |= _advanced_sampling()
            with gr.Column(scale=2, elem_id="player-column"):
                with gr.Row():
                    parts["generate_btn"] = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                    parts["stop_btn"] = gr.Button("Stop", variant="stop", elem_id="stop-btn")
                parts["message"] = gr.Markdown(elem_id="tts-message")
                gr.HTML(_PLAYER_IFRAME, elem_id="player-panel", js_on_load=None)
                gr.Markdown(_TIPS, elem_id="tips")
    return demo, Widgets(**parts)


def _speak_tab(settings: ServerSettings) -> dict:
    text = gr.Textbox(
        label="Text", lines=5, max_length=settings.max_text_chars, elem_id="tts-text",
        placeholder="Type what to say. Long text is split into sentences and streamed.",
    )
    parts: dict = {"text": text}
    parts["char_count"] = gr.Markdown(f"0 / {settings.max_text_chars} characters", elem_id="char-count")
    with gr.Tabs():
        with gr.Tab("Preset voice", id="preset") as preset_tab:
            language = gr.Radio(FIXED_LANGUAGES, value="All", label="Language", elem_id="voice-language")
            parts["voice"] = gr.Dropdown(label="Voice", elem_id="voice-select",
                                         info="Voices appear when the model has loaded.")
            parts["clip"] = gr.HTML("", elem_id="voice-clip", js_on_load=None)
        with gr.Tab("Clone a voice", id="clone") as clone_tab:
            parts["ref_audio"] = gr.Audio(sources=["upload", "microphone"], type="filepath", format="wav",
                                          label="Reference clip (3-10 s of clean speech)", elem_id="ref-audio")
            parts["ref_info"] = gr.Markdown(elem_id="ref-info")
            parts["ref_text"] = gr.Textbox(
                label="Transcript of the clip (optional)", elem_id="ref-text",
                info="If given, the model continues the clip (continuation mode); "
                     "leave empty to clone the voice only.",
            )
    gr.Examples(EXAMPLES, inputs=[text, language], label="Examples (中文 · English · 日本語)")
    return parts | {"preset_tab": preset_tab, "language": language, "clone_tab": clone_tab}


def _audition_tab(settings: ServerSettings) -> dict:
    gr.Markdown("Hear one sentence in several preset voices, one after another.")
    return {
        "audition_text": gr.Textbox(label="Sentence", elem_id="audition-text",
                                    value="Hello! This is what my voice sounds like.",
                                    max_length=settings.max_text_chars),
        "audition_voices": gr.CheckboxGroup(label="Voices to compare", elem_id="audition-voices",
                                            info=f"Up to {MAX_AUDITION_VOICES}."),
        "audition_btn": gr.Button("Compare voices", elem_id="audition-btn"),
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
