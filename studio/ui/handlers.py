"""What the page's events do, as methods of one small class over the service (no layout here).

Python never touches audio on the page. A click checks the inputs (`requests.prepare`, the same
rules as the HTTP route), then hands a JSON payload to `window.mossTTS.play` (static/gradio/bridge.js),
which posts it to the player iframe; the player streams POST /api/tts/stream into its worklet.
Problems with the inputs are shown in the page (#tts-message, only while they hold); what is
happening to the audio (generating, buffering, done, failed) only in the player's status line.
"""

from __future__ import annotations

import html
import json
import random
import secrets
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import anyio
import gradio as gr

from tts_core.errors import TTSError

from ..api.requests import STREAM, PageForm, StreamBody, UploadStore, form_body, prepare, stream_fields
from ..api.voices_api import SavedVoices
from ..errors import scrub_paths
from ..limits.clip_decode import REF_AUDIO_MIN_SAMPLE_RATE_HZ
from ..service import ServiceState, SynthesizerService
from ..settings import ServerSettings
from . import clip_check
from .examples import EXAMPLES
from .indicators import mark
from .marks import NO_MARK, VoiceMark, marked_choices, parse_marks
from .text_limits import split_at_boundary

MAX_AUDITION_VOICES = 8  # cards on the board: voices x takes
MAX_TAKES = 4
FIXED_LANGUAGES = ["All", "Chinese", "English", "Japanese"]
_LANGUAGES = {"zh": "Chinese", "en": "English", "ja": "Japanese", "jp": "Japanese", "ko": "Korean",
              "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "ru": "Russian"}
_FIELD_NAMES = {"ref_audio": "The reference clip", "ref_text": "The transcript", "text": "The text",
                "window": "The clip window", "audio_sample": "The clip", "transcript": "The transcript",
                "name": "The name"}


def language_name(code: str) -> str:
    return _LANGUAGES.get(code.lower(), code.title()) if code else "Other"


def page_default_voice(presets: list, default: str, page_language: str = "en") -> str:
    """The voice the page starts with: the server's default if it speaks the page's language, else
    the first preset that does (a first click on the English page speaks the English example)."""
    by_name = {p.name: p for p in presets}
    if default in by_name and by_name[default].language.lower() == page_language:
        return default
    return next((p.name for p in presets if p.language.lower() == page_language), default)


def saved_choices(saved: list[dict], marks: dict[str, VoiceMark] | None = None) -> list[tuple[str, str]]:
    """(label, id) pairs of the visitor-facing saved voices (GET /api/voices "saved"), with the
    visitor's marks (`ui/marks.py`): a deleted voice's mark has no choice to show on."""
    out = []
    for v in saved:
        language = f" · {language_name(v['language'])}" if v.get("language") else ""
        out.append((f"{v.get('name') or v['id']}{language}", v["id"]))
    return marked_choices(out, marks or {})


def speed_supported() -> bool:
    """Whether the stream route takes `speed` (the speech API's time-stretch is in this server)."""
    return "speed" in StreamBody.model_fields


def voice_choices(presets: list, language: str = "All",
                  marks: dict[str, VoiceMark] | None = None) -> list[tuple[str, str]]:
    """(label, name) pairs grouped by language, then by name; the visitor's favourites first, marked."""
    chosen = [p for p in presets if language == "All" or language_name(p.language) == language]
    chosen.sort(key=lambda p: (language_name(p.language), p.name))
    return marked_choices([(f"{language_name(p.language)} · {p.name} ({p.gender})", p.name) for p in chosen],
                          marks or {})


def audition_defaults(presets: list, default: str) -> list[str]:
    """The default voice plus the first voice of two other languages."""
    compare, seen = [default], {next((p.language for p in presets if p.name == default), "")}
    for p in presets:
        if p.language not in seen and len(compare) < 3:
            compare.append(p.name)
            seen.add(p.language)
    return compare


def unavailable_note(presets: list) -> str:
    """The presets that cannot speak here, grouped by why (their `unavailable_reason`), for the voice
    picker's info line: "Not available here: Sora, Kaze: needs …" (empty when every preset can speak)."""
    groups: dict[str, list[str]] = {}
    for p in presets:
        if not p.available:
            groups.setdefault(scrub_paths(p.unavailable_reason) or "no source", []).append(p.name)
    if not groups:
        return ""
    return "Not available here: " + "; ".join(f"{', '.join(names)} ({reason})" for reason, names in groups.items()) + "."


def clip_player(name: str | None, presets: list) -> str:
    preset = next((p for p in presets if p.name == name), None)
    if preset is None:
        return ""
    about = html.escape(preset.description)
    if not preset.has_clip:
        return f"<p>{about} <em>(no reference clip to play)</em></p>"
    return f"<p>{about}</p><audio controls preload='none' src='/api/voices/{quote(preset.name, safe='')}/clip'></audio>"


def page_error(message: str) -> str:
    """A core error message as a sentence for the page ("ref_audio is ..." -> "The reference clip is ..."),
    path-free like every HTTP error (`scrub_paths`)."""
    message = scrub_paths(message) or ""
    field, _, rest = message.partition(" ")
    if field in _FIELD_NAMES and rest:
        message = f"{_FIELD_NAMES[field]} {rest}"
    return f"{mark('warn')} {message[:1].upper()}{message[1:]}"


def fresh_seed(seed: float | None, random_seed: bool) -> int:
    return secrets.randbelow(2**31) if random_seed or seed is None else int(seed)


class PageHandlers:
    """The page's event handlers, bound to the service, the HTTP limits and the upload store."""

    def __init__(self, service: SynthesizerService, settings: ServerSettings, uploads: UploadStore,
                 library: SavedVoices | None = None):
        self.service = service
        self.settings = settings
        self.uploads = uploads
        self.library = library  # the server's saved voices; None: this server keeps no voices
        self.saved_voices: Callable[[], list[dict]] | None = library.listing if library is not None else None

    def presets(self) -> list:
        """The available presets once the model is ready (else none): only voices that can speak now
        are offered; the others are named in the picker's info line (`unavailable_note`)."""
        return [p for p in self.all_presets() if p.available]

    def all_presets(self) -> list:
        if self.service.state is not ServiceState.READY:
            return []
        return self.service.get().list_voices()

    def status(self) -> str:
        """The header's status line; a failed load says what happened, then what to do (offline too)."""
        service = self.service
        if service.state is ServiceState.READY:
            health = service.get().health()
            if health.get("stalled"):
                device = "GPU" if str(health.get("device", "")).startswith("cuda") else "device"
                return f"{mark('bad')} **The {device} stopped responding.** Streams were ended; the server must be restarted."
            return (f"{mark('ok')} **Ready** <span class='status-details' title='{html.escape(str(health.get('precision') or ''), quote=True)}'>"
                    f"· {engine_summary(health)} · up to {health.get('max_active_streams')} streams at once</span>")
        if service.state is ServiceState.FAILED:
            return f"{mark('bad')} **The model could not be loaded:** {scrub_paths(service.error)}"
        return f"{mark('busy')} **Loading the model** — {service.status}. You can prepare your text meanwhile."

    def saved(self) -> list[dict] | None:
        """The saved voices of GET /api/voices, or None when this server keeps none (no "My voices")."""
        if self.service.state is not ServiceState.READY or self.saved_voices is None:
            return None
        return list(self.saved_voices())

    def saved_picker(self, marks: str | None, current: str | None):
        """The "My voices" dropdown as the library is now, so a voice saved through the API after the
        page loaded is there when the tab is opened; keeps the chosen voice while it still exists.
        `marks`: the visitor's favourites and notes (JSON from the browser, `ui/marks.py`)."""
        saved = self.saved()
        if saved is None:
            return gr.skip()
        kept = current if any(v["id"] == current for v in saved) else None
        return gr.Dropdown(choices=saved_choices(saved, parse_marks(marks)), value=kept)

    def relabel(self, marks: str | None, language: str | None, voice: str | None, saved_voice: str | None) -> tuple:
        """The pickers' choices again with the visitor's marks (after a star or a note changed, here or
        on an audition card). Only the choices are sent: what is chosen stays as the page has it (this
        also runs just after the pickers were filled, before their new values reach an event's inputs).
        Outputs: voice dropdown, audition voices, "My voices" dropdown, then the star and note of the
        chosen preset and of the chosen saved voice (left alone while none is chosen)."""
        presets = self.presets()
        if not presets:
            return (gr.skip(),) * 7
        parsed, saved = parse_marks(marks), self.saved()
        saved_box = gr.skip() if saved is None else gr.Dropdown(choices=saved_choices(saved, parsed))
        fields = []
        for chosen_voice in (voice, saved_voice):
            mark = parsed.get(chosen_voice, NO_MARK) if chosen_voice else None
            fields += [gr.skip(), gr.skip()] if mark is None else [mark.star, mark.note]
        return (gr.Dropdown(choices=voice_choices(presets, language or "All", parsed)),
                gr.CheckboxGroup(choices=voice_choices(presets, "All", parsed)), saved_box, *fields)

    @staticmethod
    def mark_fields(marks: str | None, voice: str | None) -> tuple[bool, str]:
        """The star and note of `voice`, for the editor under its picker."""
        mark = parse_marks(marks).get(voice or "", NO_MARK)
        return mark.star, mark.note

    def refresh(self) -> tuple:
        """Status line; on the first 'ready' also fill the voice pickers and stop polling.

        Outputs: status, voice dropdown, audition voices, language radio, clip player, timer,
        the "My voices" tab and its dropdown, the marks box (set once the pickers are filled: its
        change event labels them with the visitor's marks, which only the browser has), then the
        Generate and Compare buttons (disabled for good when the model failed to load).
        """
        status = self.status()
        keep = (gr.skip(),) * 4
        buttons = (gr.skip(), gr.skip())
        if self.service.state in (ServiceState.LOADING, ServiceState.IDLE):
            return status, *keep, gr.Timer(active=True), gr.skip(), gr.skip(), gr.skip(), *buttons
        if self.service.state is ServiceState.FAILED:  # nothing can be generated: say so, offer nothing
            off = gr.Button(interactive=False)
            return status, *keep, gr.Timer(active=False), gr.skip(), gr.skip(), gr.skip(), off, off
        everyone = self.all_presets()
        presets = [p for p in everyone if p.available]
        note = unavailable_note(everyone)
        saved = self.saved()
        tail = (gr.Timer(active=False), gr.Tab(visible=saved is not None),
                gr.Dropdown(choices=saved_choices(saved or []), value=None), uuid.uuid4().hex, *buttons)
        if not presets:  # no preset can speak here (say why); cloning and saved voices still work
            note += " Clone a voice instead."
            return (status, gr.Dropdown(choices=[], value=None, info=note),
                    gr.CheckboxGroup(choices=[], value=[], info=note), gr.skip(), "", *tail)
        start = page_default_voice(presets, self.service.get().default_voice)
        languages = FIXED_LANGUAGES + sorted({language_name(p.language) for p in presets} - set(FIXED_LANGUAGES))
        num_languages = len({p.language for p in presets})
        return (
            status,
            gr.Dropdown(choices=voice_choices(presets), value=start,
                        info=f"{len(presets)} voices in {num_languages} languages. {note}".strip()),
            gr.CheckboxGroup(choices=voice_choices(presets), value=audition_defaults(presets, start),
                             info=f"Up to {MAX_AUDITION_VOICES}. {note}".strip()),
            gr.Radio(choices=languages),
            clip_player(start, presets),
            *tail,
        )

    async def save_voice(self, marks, name, ref_path, ref_text, clip_view=None, clip_start=None, clip_end=None,
                         use_window=False) -> tuple:
        """The clone tab's clip (cut to its window when one is used) and transcript saved as a named
        voice in the server's library. Outputs: the message, the "My voices" tab, its dropdown (the new
        voice chosen), the name box (emptied once saved)."""
        keep = (gr.skip(), gr.skip(), gr.skip())
        if self.library is None or self.service.state is not ServiceState.READY:
            return page_error("Voices can be saved once the model has loaded."), *keep
        if not ref_path:
            return page_error("Upload or record a reference clip first, then name it and save it."), *keep
        window = clip_check.chosen_window(clip_view, clip_start, clip_end) if use_window else None
        library, sample = self.library, Path(ref_path).read_bytes()
        try:
            voice, _ = await anyio.to_thread.run_sync(lambda: library.create(
                name=name or "", sample=sample, transcript=(ref_text or "").strip() or None, language=None,
                consent=None, window=f"{window[0]},{window[1]}" if window else None))
        except TTSError as exc:
            return page_error(exc.message), *keep
        saved = self.saved() or []
        return (f"{mark('ok')} Saved “{html.escape(voice.name)}”: it is under My voices.", gr.Tab(visible=True),
                gr.Dropdown(choices=saved_choices(saved, parse_marks(marks)), value=voice.id), "")

    def delete_voice(self, marks, voice_id) -> tuple:
        """Delete the voice chosen under "My voices" (None: the visitor declined). Outputs: the
        message and the "My voices" dropdown (without it)."""
        if not voice_id or self.library is None:
            return gr.skip(), gr.skip()
        try:
            deleted = self.library.library().delete(voice_id)
        except TTSError as exc:
            return page_error(exc.message), gr.skip()
        saved = self.saved() or []
        return (f"Deleted “{html.escape(deleted.name)}”.",
                gr.Dropdown(choices=saved_choices(saved, parse_marks(marks)), value=None))

    def use_example(self, index: int, voice: str | None, marks: str | None = None) -> tuple:
        """An example's text, and a voice of its language when the chosen one speaks another.

        Outputs: text, voice dropdown (value), language filter (back to All), clip."""
        _, text, language = EXAMPLES[index]
        presets = self.presets()
        current = next((p for p in presets if p.name == voice), None)
        if current is None or language_name(current.language) == language:
            return text, gr.skip(), gr.skip(), gr.skip()
        match = next((p.name for p in presets if language_name(p.language) == language), None)
        if match is None:
            return text, gr.skip(), gr.skip(), gr.skip()
        return (text, gr.Dropdown(choices=voice_choices(presets, "All", parse_marks(marks)), value=match), "All",
                clip_player(match, presets))

    def filter_language(self, marks: str | None, language: str, current: str | None) -> tuple:
        presets = self.presets()
        if not presets:
            return gr.skip(), gr.skip()
        choices = voice_choices(presets, language or "All", parse_marks(marks))
        names = [name for _, name in choices]
        value = current if current in names else (names[0] if names else None)
        return gr.Dropdown(choices=choices, value=value), clip_player(value, presets)

    def clip(self, name: str | None) -> str:
        return clip_player(name, self.presets())

    def describe_upload(self, path: str | None) -> str:
        if not path:
            return ""
        try:
            import soundfile

            info = soundfile.info(path)
        except Exception:  # any unreadable file: say so; the server gives the final word
            return page_error("This file could not be read as audio. Try WAV, FLAC, OGG or MP3.")
        seconds = info.frames / info.samplerate
        shape = f"{seconds:.1f} s, {info.samplerate / 1000:g} kHz, {'mono' if info.channels == 1 else 'stereo'}"
        min_rate = REF_AUDIO_MIN_SAMPLE_RATE_HZ
        if info.samplerate < min_rate:
            return page_error(f"Reference: {shape} — too low a sample rate to clone from; record at "
                              f"{min_rate // 1000} kHz or more.")
        if seconds < 1.5:
            return page_error(f"Reference: {shape} — very short; 3-10 s of clean speech clones best.")
        if seconds > 15:
            return page_error(f"Reference: {shape} — long; only the start is used. 3-10 s of clean speech works best.")
        return f"{mark('ok')} Reference: {shape}."

    def check_clip(self, path: str | None) -> tuple:
        """The clip doctor on an upload. Outputs: the clip's view (state), the region, window start and end."""
        view, shown = clip_check.analyse_upload(path, self.settings.max_upload_bytes)
        if view is None:
            return None, shown, None, None
        start, end = view.analysis["window"]
        return view, shown, start, end

    def redraw_clip(self, view, start, end, use_window: bool) -> str:
        """The region again, with the window the visitor set (or the whole clip)."""
        if view is None:
            return gr.skip()
        return clip_check.render(view, clip_check.chosen_window(view, start, end) if use_window else None)

    async def _checked_body(self, form: PageForm, speed: float | None = None) -> dict:
        """The stream body for `form`, checked exactly as POST /api/tts/stream will check it."""
        body = self._with_speed(form_body(form, self.settings, self.uploads), speed)
        synth = self.service.get()  # raises "still loading" / "failed to load" as a clear message
        await prepare(stream_fields(StreamBody(**body)), STREAM, synth=synth, settings=self.settings,
                      uploads=self.uploads)
        return body

    def _fitting(self, text: str | None) -> tuple[str, str]:
        """The text to speak and a warning when it had to be cut (at a sentence or word boundary)."""
        text = text or ""
        limit = self.settings.max_text_chars
        head, rest = split_at_boundary(text, limit)
        if not rest:
            return text, ""
        return head, (f"{mark('warn')} The text is {len(text):,} characters; the limit is {limit:,}. Speaking the first "
                      f"{len(head):,} (up to the end of a sentence); the last {len(rest):,} characters, from "
                      f"“{html.escape(rest[:40])}…”, are not spoken: generate them separately.")

    async def prepare_speak(self, text, voice, source, saved_voice, ref_path, ref_text, do_sample, audio_temperature,
                            audio_top_p, audio_top_k, repetition_penalty, text_temperature, seed, random_seed,
                            max_seconds, clip_view=None, clip_start=None, clip_end=None, use_window=False,
                            speed=1.0):
        """Outputs: the player payload (JSON), the message line (a problem or a warning, else empty), the seed."""
        seed = fresh_seed(seed, random_seed)
        text, warning = self._fitting(text)
        if source == "saved":
            voice = saved_voice
            if not voice:
                return "", page_error("Pick one of your saved voices (or switch back to a preset voice)."), seed
        form = PageForm(text, do_sample, audio_temperature, audio_top_p, audio_top_k, repetition_penalty,
                        text_temperature, seed, max_seconds, voice=voice, clone=source == "clone",
                        ref_path=ref_path, ref_text=ref_text,
                        ref_window=clip_check.chosen_window(clip_view, clip_start, clip_end) if use_window else None)
        try:
            body = await self._checked_body(form, speed)
        except TTSError as exc:
            return "", page_error(exc.message), seed
        label = "your reference clip" if form.clone else (voice or "default voice")
        payload = {"nonce": uuid.uuid4().hex, "items": [{"label": label, "request": body}]}
        return json.dumps(payload), warning, seed

    @staticmethod
    def _with_speed(body: dict, speed: float | None) -> dict:
        return {**body, "speed": float(speed)} if speed and float(speed) != 1.0 else body

    async def prepare_audition(self, text, names, do_sample, audio_temperature, audio_top_p, audio_top_k,
                               repetition_penalty, text_temperature, seed, random_seed, max_seconds, blind=False,
                               takes=1):
        """Outputs as `prepare_speak`; one item per voice, all with the same seed (a fair comparison).
        `blind`: the items in a random order, named A, B, C... (`blind_items`); `takes` (1-4): each
        voice that many times, with seeds `take_seeds(seed, takes)`."""
        seed = fresh_seed(seed, random_seed)
        text, warning = self._fitting(text)
        if not names:
            return "", page_error("Pick at least one voice to compare."), seed
        takes = int(takes or 1)
        if not 1 <= takes <= MAX_TAKES:
            return "", page_error(f"Takes must be 1 to {MAX_TAKES}."), seed
        if len(names) * takes > MAX_AUDITION_VOICES:
            return "", page_error(f"{len(names)} voices × {takes} takes is {len(names) * takes} cards; the board holds "
                                  f"{MAX_AUDITION_VOICES}: pick fewer voices or takes."), seed
        listed = [name for _, name in voice_choices(self.presets())]
        names = sorted(names, key=lambda n: listed.index(n) if n in listed else len(listed))  # the list's order
        items = []
        try:
            for name in names:
                for take, take_seed in enumerate(take_seeds(seed, takes)):
                    form = PageForm(text, do_sample, audio_temperature, audio_top_p, audio_top_k, repetition_penalty,
                                    text_temperature, take_seed, max_seconds, voice=name)
                    label = name if takes == 1 else f"{name} · take {take + 1}"
                    items.append({"label": label, "request": await self._checked_body(form),
                                  **({"take": take + 1} if takes > 1 else {})})
        except TTSError as exc:
            return "", page_error(exc.message), seed
        if blind:
            items = blind_items(items, random.Random(secrets.randbits(64)))
        payload = {"nonce": uuid.uuid4().hex, "items": items, "blind": bool(blind)}
        return json.dumps(payload), warning, seed


def take_seeds(seed: int, takes: int) -> list[int]:
    """The seeds of `takes` takes: the chosen seed first, then the next ones (mod 2**31)."""
    return [(int(seed) + i) % 2**31 for i in range(takes)]


def blind_items(items: list[dict], rng: random.Random) -> list[dict]:
    """`items` shuffled by `rng` and named A, B, C...; each keeps its voice in `voice` for the reveal."""
    shuffled = [dict(item) for item in items]
    rng.shuffle(shuffled)
    return [{**item, "label": chr(ord("A") + i), "voice": item["label"]} for i, item in enumerate(shuffled)]


def engine_summary(health: dict) -> str:
    """What runs, for the page's header, in a few words: the device and the weights' precision
    ("cpu · fp16"); why that precision (the load's reason) goes in the line's tooltip."""
    device = str(health.get("device") or "?")
    dtype = str(health.get("dtype") or "?")
    return f"{device} · {health.get('quantize') or _SHORT_DTYPES.get(dtype, dtype)}"


_SHORT_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
