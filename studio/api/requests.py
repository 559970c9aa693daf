"""Request bodies -> `SynthesisRequest`: the one place where a client's fields are checked and mapped.

Three bodies arrive here: the JSON of `POST /api/tts/stream` (`StreamBody`), OpenAI's
`SpeechRequest`, and the Gradio page's form (`form_body` turns its widgets into a stream body,
which the player then posts). Each becomes `Fields`, the engine's vocabulary, and goes through one
`prepare`: text limits, sampling, reference clip (inline, uploaded or remote), transcript, voice.
The two APIs name some fields differently and differ on purpose in how `voice` is read; a
`Dialect` says how, so every error still names the field as the client spelled it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict

from tts_core.config import SamplingParams
from tts_core.errors import InvalidRequestError, VoiceNotFoundError, VoiceUnavailableError
from tts_core.text import detect_language
from tts_core.types import SynthesisRequest, Voice
from tts_core.voices.library import is_voice_id

from ..limits.clip_decode import CLIP_DECODER
from ..limits.ref_audio import read_ref_audio
from ..settings import ServerSettings
from . import clip_report
from .openai_schemas import OPENAI_VOICES, SAMPLING_FIELDS, SpeechRequest, VoiceId

FRAMES_PER_SECOND = 12.5  # codec frame rate: one frame = 80 ms
_SAMPLING_PARAMS = tuple(SamplingParams.__dataclass_fields__)


class UploadStore:
    """Reference clips the page uploaded, kept in memory by content hash (bounded LRU).

    The Gradio handler stores an upload once and hands the player only its id, so a clip does not
    travel server → browser → server as base64 on every click.
    """

    def __init__(self, max_items: int = 32, max_total_bytes: int = 256 * 1024 * 1024):
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._max_items = max_items
        self._max_total_bytes = max_total_bytes

    def put(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()[:24]
        with self._lock:
            self._items[key] = data
            self._items.move_to_end(key)
            while len(self._items) > self._max_items or (
                len(self._items) > 1 and sum(map(len, self._items.values())) > self._max_total_bytes
            ):
                self._items.popitem(last=False)
        return key

    def get(self, key: str) -> bytes:
        with self._lock:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
        if data is None:
            raise InvalidRequestError(
                "the uploaded reference clip is no longer on the server; upload it again",
                param="ref_audio_id",
                code="upload_expired",
            )
        return data


class StreamBody(BaseModel):
    """JSON body of POST /api/tts/stream. Unknown fields are refused so typos do not pass silently."""

    model_config = ConfigDict(extra="forbid")

    text: str
    voice: str | None = None
    ref_audio: str | None = None  # base64, data: URL, or (with --allow-remote-audio) an http(s) URL
    ref_audio_id: str | None = None  # an upload the page stored in UploadStore
    ref_text: str | None = None
    mode: str | None = None  # default: continuation when ref_text is given, else voice_clone
    seed: int | None = None
    max_frames: int | None = None
    do_sample: bool | None = None
    audio_temperature: float | None = None
    audio_top_p: float | None = None
    audio_top_k: int | None = None
    audio_repetition_penalty: float | None = None
    text_temperature: float | None = None
    text_top_p: float | None = None
    text_top_k: int | None = None
    speed: float | None = None  # 0.25-4, pitch-preserving (the page offers 0.5-2)
    transport: str | None = None  # the wire format: "opus" (None) or "s16" (studio/delivery/transports.py)


# A saved voice id -> (the voice, its label); blocking (reads the library, may re-encode the clip).
SavedLookup = Callable[[str], tuple[Voice, str]]


@dataclass(frozen=True, slots=True)
class Fields:
    """A request body in the engine's vocabulary. `sampling` holds only the SamplingParams fields given."""

    text: str
    voice: str | None = None
    ref_audio: str | None = None
    ref_audio_id: str | None = None
    ref_text: str | None = None
    mode: str | None = None
    seed: int | None = None
    max_frames: int | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)
    greedy: bool = False


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one API differs from the engine's vocabulary.

    Args:
        names: engine field -> this API's name for it, where they differ (errors are renamed).
        too_long_code: the error code of a text or transcript over the limit.
        preset_aliases: None: `voice` goes to the engine as given and a clip plus a voice is refused.
            Otherwise `voice` is matched against the presets here (case-insensitive), these names
            (that are no preset's) mean the preset of the input's language (`resolve_preset`), and a
            clip overrides `voice` (OpenAI clients always send one).
    """

    names: Mapping[str, str]
    too_long_code: str
    preset_aliases: frozenset[str] | None = None


STREAM = Dialect(names={}, too_long_code="text_too_long")
OPENAI = Dialect(
    names={"text": "input", **{engine: api for api, engine in SAMPLING_FIELDS.items() if api != engine}},
    too_long_code="string_above_max_length",
    preset_aliases=OPENAI_VOICES,
)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked request and who speaks it: a preset name, or "reference" for a clip."""

    request: SynthesisRequest
    voice_label: str


# ---- bodies -> Fields ---------------------------------------------------------------------------


def stream_fields(body: StreamBody) -> Fields:
    sampling = {name: value for name in _SAMPLING_PARAMS if (value := getattr(body, name)) is not None}
    return Fields(text=body.text, voice=body.voice, ref_audio=body.ref_audio, ref_audio_id=body.ref_audio_id,
                  ref_text=body.ref_text, mode=body.mode, seed=body.seed, max_frames=body.max_frames,
                  sampling=sampling)


def openai_fields(body: SpeechRequest) -> Fields:
    voice = body.voice.id if isinstance(body.voice, VoiceId) else body.voice
    sampling = {engine: value for api, engine in SAMPLING_FIELDS.items() if (value := getattr(body, api)) is not None}
    return Fields(text=body.input, voice=voice, ref_audio=body.ref_audio, ref_text=body.ref_text, seed=body.seed,
                  max_frames=body.max_frames, sampling=sampling, greedy=body.greedy)


@dataclass(frozen=True, slots=True)
class PageForm:
    """The Gradio page's inputs for one request, as its widgets give them."""

    text: str | None
    do_sample: bool
    audio_temperature: float
    audio_top_p: float
    audio_top_k: float
    repetition_penalty: float
    text_temperature: float
    seed: int | None
    max_seconds: float | None
    voice: str | None = None
    clone: bool = False  # the "Clone a voice" tab: `ref_path` and `ref_text` instead of `voice`
    ref_path: str | None = None  # Gradio's temporary copy of the uploaded or recorded clip
    ref_text: str | None = None
    ref_window: tuple[float, float] | None = None  # the "Clip check" window: the clone uses only it


def form_body(form: PageForm, settings: ServerSettings, uploads: UploadStore) -> dict:
    """The stream body (JSON) the player will post for `form`; a clip is stored once and sent by id."""
    body: dict = {
        "text": form.text or "",
        "seed": int(form.seed) if form.seed is not None else None,
        "max_frames": max(1, int(form.max_seconds * FRAMES_PER_SECOND)) if form.max_seconds else None,  # at most
        "do_sample": bool(form.do_sample),
        "audio_temperature": float(form.audio_temperature),
        "audio_top_p": float(form.audio_top_p),
        "audio_top_k": int(form.audio_top_k),
        "audio_repetition_penalty": float(form.repetition_penalty),
        "text_temperature": float(form.text_temperature),
    }
    if not form.clone:
        body["voice"] = form.voice or None
        return body
    if not form.ref_path:
        raise InvalidRequestError(
            "Upload or record a reference clip first (or switch back to a preset voice).", param="ref_audio")
    data = Path(form.ref_path).read_bytes()
    if len(data) > settings.max_upload_bytes:
        raise InvalidRequestError(
            f"The reference clip is larger than {settings.max_upload_bytes >> 20} MB; use a shorter one (3-10 s).",
            param="ref_audio")
    if form.ref_window is not None:
        data = clip_report.cut(data, form.ref_window, param="window")
    body["ref_audio_id"] = uploads.put(data)
    body["ref_text"] = (form.ref_text or "").strip() or None
    return body


# ---- Fields -> SynthesisRequest -----------------------------------------------------------------


async def prepare(fields: Fields, dialect: Dialect, *, synth, settings: ServerSettings,
                  uploads: UploadStore | None = None, saved: SavedLookup | None = None) -> Prepared:
    """Check every field and build the request; cheap checks first, the clip is decoded last.

    `saved` resolves a saved voice id (`voice_...`) given as `voice`.
    """
    _check_text(fields, dialect, settings)
    _check_voice_fields(fields, dialect, settings)
    sampling = _sampling(fields, dialect)
    clip_voice = await _reference_voice(fields, settings, uploads, synth)
    if clip_voice is not None:
        voice: Voice | str | None = clip_voice
        label = "reference"
    elif saved is not None and is_voice_id((fields.voice or "").strip()):
        voice, label = await anyio.to_thread.run_sync(saved, (fields.voice or "").strip())
    elif dialect.preset_aliases is not None:
        label = resolve_preset(synth, fields.voice, dialect.preset_aliases, text=fields.text)
        voice = Voice.preset(label)
    else:
        voice, label = fields.voice, fields.voice or synth.default_voice
    continues = isinstance(voice, Voice) and voice.transcript is not None
    mode = fields.mode or ("continuation" if continues else "voice_clone")
    try:
        request = SynthesisRequest(text=fields.text, voice=voice, mode=mode, sampling=sampling, seed=fields.seed,
                                   max_frames=fields.max_frames)
    except InvalidRequestError as exc:
        raise _renamed(exc, dialect) from None
    return Prepared(request, label)


def resolve_preset(synth, name: str | None, aliases: frozenset[str] = frozenset(), *, text: str = "") -> str:
    """The preset to use for `name` (case-insensitive); empty: the default preset; one of `aliases`
    (OpenAI's voice names): the preset of `text`'s language (`VoiceBank.preset_for_language`)."""
    name = (name or "").strip()
    if not name:
        return synth.default_voice
    preset = synth.preset_info(name)  # one preset looked at, not the whole list: this runs per request
    if preset is None:
        if name.lower() in aliases:
            return synth.voices.preset_for_language(detect_language(text))
        presets = [p.name for p in synth.list_voices()]
        raise VoiceNotFoundError(
            f"unknown voice {name[:80]!r}: choose one of {', '.join(sorted(presets))} "
            "(GET /v1/voices lists them), or send ref_audio to clone a voice",
            param="voice", code="voice_not_found",
        )
    if not preset.available:
        raise VoiceUnavailableError(
            f"voice {preset.name!r} is unavailable: it {preset.unavailable_reason or 'has no source'}; "
            "choose another voice", param="voice", code="voice_unavailable",
        )
    return preset.name


def _public(dialect: Dialect, name: str) -> str:
    return dialect.names.get(name, name)


def _renamed(exc: InvalidRequestError, dialect: Dialect) -> InvalidRequestError:
    """`exc` with the engine's field name replaced by the client's (message and `param`)."""
    public = dialect.names.get(exc.param or "")
    if public is None:
        return exc
    return type(exc)(exc.message.replace(exc.param, public, 1), param=public, code=exc.code)


def _check_text(fields: Fields, dialect: Dialect, settings: ServerSettings) -> None:
    name = _public(dialect, "text")
    if not fields.text.strip():
        raise InvalidRequestError(f"{name} is empty: type something to say", param=name, code="empty_text")
    if len(fields.text) > settings.max_text_chars:
        raise InvalidRequestError(
            f"{name} is {len(fields.text)} characters; the limit is {settings.max_text_chars}: split the text",
            param=name, code=dialect.too_long_code,
        )


def _check_voice_fields(fields: Fields, dialect: Dialect, settings: ServerSettings) -> None:
    """The voice, the clip and its transcript must fit together (checked before any decoding)."""
    if fields.ref_audio and fields.ref_audio_id:
        raise InvalidRequestError("give ref_audio or ref_audio_id, not both", param="ref_audio")
    has_clip = fields.ref_audio is not None or bool(fields.ref_audio_id)
    if has_clip and fields.voice and dialect.preset_aliases is None:
        raise InvalidRequestError("give either a preset voice or a reference clip, not both", param="voice")
    if fields.ref_text and not has_clip:
        raise InvalidRequestError("ref_text is the transcript of ref_audio: send the clip too", param="ref_text")
    if fields.ref_text is not None and len(fields.ref_text) > settings.max_text_chars:
        raise InvalidRequestError(
            f"ref_text is {len(fields.ref_text)} characters; the limit is {settings.max_text_chars}: it is the "
            "transcript of a short clip", param="ref_text", code=dialect.too_long_code,
        )


def _sampling(fields: Fields, dialect: Dialect) -> SamplingParams:
    if fields.greedy and fields.sampling.get("do_sample"):
        raise InvalidRequestError("greedy and do_sample=true contradict each other: send one", param="greedy")
    base = SamplingParams.greedy() if fields.greedy else SamplingParams()
    try:
        return dataclasses.replace(base, **fields.sampling)
    except InvalidRequestError as exc:
        raise _renamed(exc, dialect) from None


async def _reference_voice(fields: Fields, settings: ServerSettings, uploads: UploadStore | None,
                           synth) -> Voice | None:
    """The reference clip's voice, checked, decoded and encoded in the bounded clip pool (counted in
    `synth`'s queue limit): an upload (by id), base64 / data: URL / allowed URL, never a path."""
    if fields.ref_audio_id:
        if uploads is None:
            raise InvalidRequestError("ref_audio_id is not accepted here: send ref_audio", param="ref_audio_id")
        audio = uploads.get(fields.ref_audio_id)  # the same limits as ref_audio:
        return await CLIP_DECODER.voice(audio, settings, synth=synth, transcript=fields.ref_text)
    if fields.ref_audio is not None:
        return await read_ref_audio(fields.ref_audio, settings, synth=synth, transcript=fields.ref_text)
    return None
