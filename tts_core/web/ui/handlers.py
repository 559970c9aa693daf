"""The Gradio page: controls on the left, the AudioWorklet player (an iframe) on the right.

Python never touches audio here. A click validates the inputs in Python (same rules as the HTTP
route), then hands a JSON payload to `window.mossTTS.play` (static/bridge.js), which posts it to the
player iframe; the player streams POST /api/tts/stream into its worklet. Errors in the inputs are
shown in the page (#tts-message); errors of the stream itself are shown in the player.
"""

from __future__ import annotations

import html
import json
import secrets
import uuid
from pathlib import Path
from urllib.parse import quote

import gradio as gr

from .config import SamplingParams
from .errors import InvalidRequestError, TTSError
from .server import StreamBody, UploadStore, build_request
from .service import ServiceState, SynthesizerService
from .settings import ServerSettings

FRAMES_PER_SECOND = 12.5  # codec frame rate: one frame = 80 ms
MAX_AUDITION_VOICES = 8
_LANGUAGES = {"zh": "Chinese", "en": "English", "ja": "Japanese", "jp": "Japanese", "ko": "Korean",
              "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "ru": "Russian"}
_FIXED_LANGUAGES = ["All", "Chinese", "English", "Japanese"]
_DEFAULTS = SamplingParams()

EXAMPLES = [
    ["今天天气很好，我们一起去公园散步吧。路上还可以买一杯热咖啡。", "Chinese"],
    ["Streaming speech starts playing while the rest of the sentence is still being generated.", "English"],
    ["こんにちは。今日はいい天気ですね。一緒に散歩に行きませんか。", "Japanese"],
    ["The quick brown fox jumps over the lazy dog. Then it takes a long nap in the afternoon sun.", "English"],
]

# One-line JS snippets; everything else lives in static/bridge.js and static/player.js.
_JS_ARM = "() => { window.mossTTS && window.mossTTS.arm(); }"
_JS_PLAY = "(p) => { window.mossTTS && window.mossTTS.play(p); }"
_JS_STOP = "() => { window.mossTTS && window.mossTTS.stop(); }"
_TIPS = """**Tips**
- The player starts once 0.2 s of audio is buffered. **TTFP** is the time from your click to the
  first sound; **RTF** is generation time ÷ audio length (below 1 = faster than real time).
- 3-10 s of clean, single-speaker speech clones best.
- Same seed + same settings = the same audio (see *Advanced sampling*).
- Scripts can use `POST /api/tts/stream` (raw 48 kHz stereo float32) or the OpenAI-compatible
  `POST /v1/audio/speech`; [the API docs](/docs) list every field."""
_PLAYER_IFRAME = ('<iframe id="moss-player" src="/player/player.html?embed=1" allow="autoplay" '
                  'title="Streaming audio player"></iframe>')


def language_name(code: str) -> str:
    return _LANGUAGES.get(code.lower(), code.title()) if code else "Other"


def _available_presets(service: SynthesizerService) -> list:
    if service.state is not ServiceState.READY:
        return []
    return [p for p in service.get().list_voices() if p.available]


def _voice_choices(presets: list, language: str = "All") -> list[tuple[str, str]]:
    """(label, name) pairs grouped by language, then by name."""
    chosen = [p for p in presets if language == "All" or language_name(p.language) == language]
    chosen.sort(key=lambda p: (language_name(p.language), p.name))
    return [(f"{language_name(p.language)} · {p.name} ({p.gender})", p.name) for p in chosen]


def _status_line(service: SynthesizerService) -> str:
    if service.state is ServiceState.READY:
        health = service.get().health()
        return (f"🟢 **Ready** · {health.get('device')} · {health.get('dtype')} · "
                f"up to {health.get('max_active_streams')} streams at once")
    if service.state is ServiceState.FAILED:
        return f"🔴 **The model could not be loaded.** {service.error}"
    return f"⏳ **Loading the model** — {service.status}. You can prepare your text meanwhile."


def _clip_player(name: str | None, presets: list) -> str:
    preset = next((p for p in presets if p.name == name), None)
    if preset is None:
        return ""
    about = html.escape(preset.description)
    if not preset.has_clip:
        return f"<p>{about} <em>(no reference clip to play)</em></p>"
    return f"<p>{about}</p><audio controls preload='none' src='/api/voices/{quote(preset.name, safe='')}/clip'></audio>"


_FIELD_NAMES = {"ref_audio": "The reference clip", "ref_text": "The transcript", "text": "The text"}


def _error(message: str) -> str:
    """A core error message as a sentence for the page ("ref_audio is ..." -> "The reference clip is ...")."""
    field, _, rest = message.partition(" ")
    if field in _FIELD_NAMES and rest:
        message = f"{_FIELD_NAMES[field]} {rest}"
    return f"⚠️ {message[:1].upper()}{message[1:]}"


def build_ui(service: SynthesizerService, settings: ServerSettings, uploads: UploadStore) -> gr.Blocks:
    """The studio page. Voices appear once the model has loaded (a timer polls the service)."""

    def refresh():
        """Status line; on the first 'ready' also fill the voice pickers and stop polling."""
        status = _status_line(service)
        if service.state is ServiceState.LOADING or service.state is ServiceState.IDLE:
            return status, gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=True)
        presets = _available_presets(service)
        if not presets:
            return status, gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False)
        default = service.get().default_voice
        languages = _FIXED_LANGUAGES + sorted({language_name(p.language) for p in presets} - set(_FIXED_LANGUAGES))
        # Audition defaults: the default voice plus the first voice of two other languages.
        compare, seen = [default], {next((p.language for p in presets if p.name == default), "")}
        for p in presets:
            if p.language not in seen and len(compare) < 3:
                compare.append(p.name)
                seen.add(p.language)
        num_languages = len({p.language for p in presets})
        return (
            status,
            gr.Dropdown(choices=_voice_choices(presets), value=default,
                        info=f"{len(presets)} voices in {num_languages} languages; the clip below is its reference."),
            gr.CheckboxGroup(choices=_voice_choices(presets), value=compare),
            gr.Radio(choices=languages),
            _clip_player(default, presets),
            gr.Timer(active=False),
        )

    def filter_language(language: str, current: str | None):
        presets = _available_presets(service)
        if not presets:
            return gr.skip(), gr.skip()
        choices = _voice_choices(presets, language or "All")
        names = [name for _, name in choices]
        value = current if current in names else (names[0] if names else None)
        return gr.Dropdown(choices=choices, value=value), _clip_player(value, presets)

    def describe_upload(path: str | None) -> str:
        if not path:
            return ""
        try:
            import soundfile

            info = soundfile.info(path)
        except Exception:  # any unreadable file: say so; the server gives the final word
            return _error("This file could not be read as audio. Try WAV, FLAC, OGG or MP3.")
        seconds = info.frames / info.samplerate
        shape = f"{seconds:.1f} s, {info.samplerate / 1000:g} kHz, {'mono' if info.channels == 1 else 'stereo'}"
        if info.samplerate < settings.ref_audio_min_sample_rate_hz:
            return _error(f"Reference: {shape} — too low a sample rate to clone from; record at "
                          f"{settings.ref_audio_min_sample_rate_hz // 1000} kHz or more.")
        if seconds < 1.5:
            return _error(f"Reference: {shape} — very short; 3-10 s of clean speech clones best.")
        if seconds > 15:
            return _error(f"Reference: {shape} — long; only the start is used. 3-10 s of clean speech works best.")
        return f"✅ Reference: {shape}."

    def request_fields(text, voice, source, ref_path, ref_text, do_sample, audio_temperature, audio_top_p,
                       audio_top_k, repetition_penalty, text_temperature, seed, max_seconds) -> dict:
        fields: dict = {
            "text": text or "",
            "seed": int(seed) if seed is not None else None,
            "max_frames": max(1, int(max_seconds * FRAMES_PER_SECOND)) if max_seconds else None,  # at most
            "do_sample": bool(do_sample),
            "audio_temperature": float(audio_temperature),
            "audio_top_p": float(audio_top_p),
            "audio_top_k": int(audio_top_k),
            "audio_repetition_penalty": float(repetition_penalty),
            "text_temperature": float(text_temperature),
        }
        if source == "clone":
            if not ref_path:
                raise InvalidRequestError(
                    "Upload or record a reference clip first (or switch back to a preset voice).", param="ref_audio")
            data = Path(ref_path).read_bytes()
            if len(data) > settings.max_upload_bytes:
                raise InvalidRequestError(
                    f"The reference clip is larger than {settings.max_upload_bytes >> 20} MB; "
                    "use a shorter one (3-10 s).", param="ref_audio")
            fields["ref_audio_id"] = uploads.put(data)
            fields["ref_text"] = (ref_text or "").strip() or None
        else:
            fields["voice"] = voice or None
        return fields

    async def validated(fields: dict) -> None:
        service.get()  # raises "still loading" / "failed to load" as a clear message
        await build_request(StreamBody(**fields), settings, uploads)

    def fresh_seed(seed, random_seed):
        return secrets.randbelow(2**31) if random_seed or seed is None else int(seed)

    async def prepare_speak(text, voice, source, ref_path, ref_text, do_sample, audio_temperature, audio_top_p,
                            audio_top_k, repetition_penalty, text_temperature, seed, random_seed, max_seconds):
        seed = fresh_seed(seed, random_seed)
        try:
            fields = request_fields(text, voice, source, ref_path, ref_text, do_sample, audio_temperature,
                                    audio_top_p, audio_top_k, repetition_penalty, text_temperature, seed,
                                    max_seconds)
            await validated(fields)
        except TTSError as exc:
            return "", _error(exc.message), seed
        label = "your reference clip" if source == "clone" else (voice or "default voice")
        payload = {"nonce": uuid.uuid4().hex, "items": [{"label": label, "request": fields}]}
        return json.dumps(payload), f"▶ Speaking {len(text)} characters as **{label}** (seed {seed}).", seed

    async def prepare_audition(text, names, do_sample, audio_temperature, audio_top_p, audio_top_k,
                               repetition_penalty, text_temperature, seed, random_seed, max_seconds):
        seed = fresh_seed(seed, random_seed)  # one seed for every voice: a fair comparison
        if not names:
            return "", _error("Pick at least one voice to compare."), seed
        if len(names) > MAX_AUDITION_VOICES:
            return "", _error(f"Pick at most {MAX_AUDITION_VOICES} voices to compare."), seed
        items = []
        try:
            for name in names:
                fields = request_fields(text, name, "preset", None, None, do_sample, audio_temperature,
                                        audio_top_p, audio_top_k, repetition_penalty, text_temperature, seed,
                                        max_seconds)
                await validated(fields)
                items.append({"label": name, "request": fields})
        except TTSError as exc:
            return "", _error(exc.message), seed
        payload = {"nonce": uuid.uuid4().hex, "items": items}
        return json.dumps(payload), f"▶ Comparing {len(items)} voices, one after another (seed {seed}).", seed

    count_js = "(t) => `${(t || '').length} / " + str(settings.max_text_chars) + " characters`"

    with gr.Blocks(title="MOSS-TTS-Nano Studio") as demo:
        with gr.Row(elem_id="header"):
            gr.Markdown("# MOSS-TTS-Nano Studio\nStreaming text-to-speech, 48 kHz stereo, "
                        "20 languages, voice cloning from a short clip.")
            status = gr.Markdown(lambda: _status_line(service), elem_id="model-status")
        timer = gr.Timer(1.0)
        payload = gr.Textbox(visible=False, elem_id="tts-payload")
        source = gr.State("preset")

        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                with gr.Tabs():
                    with gr.Tab("Speak", id="speak"):
                        text = gr.Textbox(
                            label="Text", lines=5, max_length=settings.max_text_chars, elem_id="tts-text",
                            placeholder="Type what to say. Long text is split into sentences and streamed.",
                        )
                        char_count = gr.Markdown(f"0 / {settings.max_text_chars} characters",
                                                 elem_id="char-count")
                        with gr.Tabs():
                            with gr.Tab("Preset voice", id="preset") as preset_tab:
                                language = gr.Radio(_FIXED_LANGUAGES, value="All", label="Language",
                                                    elem_id="voice-language")
                                voice = gr.Dropdown(label="Voice", elem_id="voice-select",
                                                    info="Voices appear when the model has loaded.")
                                clip = gr.HTML("", elem_id="voice-clip", js_on_load=None)
                            with gr.Tab("Clone a voice", id="clone") as clone_tab:
                                ref_audio = gr.Audio(sources=["upload", "microphone"], type="filepath",
                                                     format="wav", label="Reference clip (3-10 s of clean speech)",
                                                     elem_id="ref-audio")
                                ref_info = gr.Markdown(elem_id="ref-info")
                                ref_text = gr.Textbox(
                                    label="Transcript of the clip (optional)", elem_id="ref-text",
                                    info="If given, the model continues the clip (continuation mode); "
                                         "leave empty to clone the voice only.",
                                )
                        gr.Examples(EXAMPLES, inputs=[text, language], label="Examples (中文 · English · 日本語)")
                    with gr.Tab("Voice audition", id="audition"):
                        gr.Markdown("Hear one sentence in several preset voices, one after another.")
                        audition_text = gr.Textbox(label="Sentence", elem_id="audition-text",
                                                   value="Hello! This is what my voice sounds like.",
                                                   max_length=settings.max_text_chars)
                        audition_voices = gr.CheckboxGroup(label="Voices to compare", elem_id="audition-voices",
                                                           info=f"Up to {MAX_AUDITION_VOICES}.")
                        audition_btn = gr.Button("Compare voices", elem_id="audition-btn")

                with gr.Accordion("Advanced sampling", open=False, elem_id="advanced"):
                    do_sample = gr.Checkbox(True, label="Sample (off = greedy: always the most likely sound)")
                    audio_temperature = gr.Slider(0.1, 1.5, _DEFAULTS.audio_temperature, step=0.05,
                                                  label="Audio temperature",
                                                  info="Higher = livelier and more varied; lower = steadier.")
                    audio_top_p = gr.Slider(0.1, 1.0, _DEFAULTS.audio_top_p, step=0.01, label="Audio top-p",
                                            info="Only the most likely sounds that add up to this share are kept.")
                    audio_top_k = gr.Slider(0, 100, _DEFAULTS.audio_top_k, step=1, label="Audio top-k",
                                            info="Choose among this many most likely sounds (0 = no limit).")
                    repetition_penalty = gr.Slider(1.0, 2.0, _DEFAULTS.audio_repetition_penalty, step=0.05,
                                                   label="Repetition penalty",
                                                   info="Raise it if the voice stutters or repeats itself.")
                    text_temperature = gr.Slider(0.1, 1.5, _DEFAULTS.text_temperature, step=0.05,
                                                 label="Stop-decision temperature",
                                                 info="How freely the model decides when the sentence is over.")
                    with gr.Row():
                        seed = gr.Number(0, label="Seed", precision=0, minimum=0, elem_id="seed",
                                         info="Same seed + same settings = the same audio.")
                        random_seed = gr.Checkbox(True, label="New random seed each time", elem_id="random-seed")
                    max_seconds = gr.Slider(0, 120, 0, step=0.5, label="Maximum length (seconds)",
                                            elem_id="max-seconds", info="0 = automatic, from the text length.")

            with gr.Column(scale=2, elem_id="player-column"):
                with gr.Row():
                    generate_btn = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn")
                message = gr.Markdown(elem_id="tts-message")
                gr.HTML(_PLAYER_IFRAME, elem_id="player-panel", js_on_load=None)
                gr.Markdown(_TIPS, elem_id="tips")

        sampling = [do_sample, audio_temperature, audio_top_p, audio_top_k, repetition_penalty, text_temperature]
        pickers = [status, voice, audition_voices, language, clip, timer]
        hidden = {"show_progress": "hidden", "api_visibility": "private"}
        demo.load(refresh, outputs=pickers, **hidden)
        timer.tick(refresh, outputs=pickers, **hidden)
        text.change(None, inputs=text, outputs=char_count, js=count_js, **hidden)
        language.change(filter_language, inputs=[language, voice], outputs=[voice, clip], **hidden)
        voice.change(lambda name: _clip_player(name, _available_presets(service)), inputs=voice,
                     outputs=clip, **hidden)
        preset_tab.select(lambda: "preset", outputs=source, **hidden)
        clone_tab.select(lambda: "clone", outputs=source, **hidden)
        ref_audio.change(describe_upload, inputs=ref_audio, outputs=ref_info, **hidden)

        # Validation is quick: run it outside Gradio's queue (saves ~120 ms of time to first audio).
        generate_btn.click(None, js=_JS_ARM, **hidden)
        generate_btn.click(
            prepare_speak,
            inputs=[text, voice, source, ref_audio, ref_text, *sampling, seed, random_seed, max_seconds],
            outputs=[payload, message, seed], queue=False, **hidden,
        ).then(None, inputs=payload, js=_JS_PLAY, queue=False, **hidden)
        audition_btn.click(None, js=_JS_ARM, **hidden)
        audition_btn.click(
            prepare_audition,
            inputs=[audition_text, audition_voices, *sampling, seed, random_seed, max_seconds],
            outputs=[payload, message, seed], queue=False, **hidden,
        ).then(None, inputs=payload, js=_JS_PLAY, queue=False, **hidden)
        stop_btn.click(None, js=_JS_STOP, **hidden)
    return demo
