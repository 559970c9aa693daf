"""Saved voices over HTTP: `POST/GET /v1/audio/voices`, `GET/DELETE /v1/audio/voices/{id}`, the clip.

OpenAI's custom-voice form (docs/API.md): the clip passes the same checks as `ref_audio`, is encoded
once and kept under the cache dir (`voices/library.py`), and its id then works as `voice` anywhere.
`SavedVoices` is the routes' view of the library, opened once the model is ready (the folder and
codec fingerprint come from its voice bank); it turns an id into a `Voice` of codes.
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

import anyio
import numpy as np
from fastapi import APIRouter, File, Form, UploadFile
from fastapi.responses import Response
from pydantic import BaseModel, Field

from tts_core.audio.io import sniff_container
from tts_core.errors import InvalidRequestError, VoiceNotFoundError
from tts_core.types import SAMPLE_RATE_HZ, SAMPLES_PER_FRAME, Voice
from tts_core.voices.catalog import LANGUAGES
from tts_core.voices.library import SavedVoice, VoiceLibrary, sanitize_name

from ..limits.ref_audio import check_clip
from ..service import SynthesizerService
from ..settings import ServerSettings
from . import clip_report
from .clip_report import ClipAnalysisInfo
from .openai_schemas import ErrorResponse

logger = logging.getLogger(__name__)

MAX_SAVED_VOICES = 64
SAMPLE_PARAM = "audio_sample"


class SavedVoiceInfo(BaseModel):
    """OpenAI's voice object, plus what this server keeps about the clip."""

    id: str = Field(description="Use it as `voice` in /v1/audio/speech and /api/tts/stream.")
    object: Literal["audio.voice"] = "audio.voice"
    type: Literal["audio_sample"] = "audio_sample"
    name: str
    created_at: int = Field(description="Unix seconds.")
    transcript: str | None = Field(None, description="Given: the voice speaks in continuation mode.")
    language: str | None = None
    sample_seconds: float
    sample_url: str = Field(description="The saved clip, to audition it.")
    analysis: ClipAnalysisInfo | None = Field(None, description="The clip doctor's report on the uploaded "
                                              "clip (in the response that saves it; null when listed).")


class SavedVoiceList(BaseModel):
    object: Literal["list"] = "list"
    data: list[SavedVoiceInfo]


class DeletedVoice(BaseModel):
    id: str
    object: Literal["audio.voice.deleted"] = "audio.voice.deleted"
    deleted: bool = True


def voice_info(voice: SavedVoice, analysis: ClipAnalysisInfo | None = None) -> SavedVoiceInfo:
    return SavedVoiceInfo(id=voice.id, name=voice.name, created_at=voice.created_at, transcript=voice.transcript,
                          language=voice.language, sample_seconds=voice.sample_seconds,
                          sample_url=f"/v1/audio/voices/{voice.id}/sample", analysis=analysis)


class SavedVoices:
    """The library of the service's model, opened on first use (after the model has loaded)."""

    def __init__(self, service: SynthesizerService, settings: ServerSettings):
        self.service = service
        self.settings = settings
        self._library: VoiceLibrary | None = None

    def library(self) -> VoiceLibrary:
        if self._library is None:
            cache = self.service.get().voices.code_cache.directory  # <cache>/voices/<codec fingerprint>
            self._library = VoiceLibrary(cache.parent / "library", max_voices=MAX_SAVED_VOICES,
                                         max_sample_bytes=self.settings.max_upload_bytes)
        return self._library

    @property
    def fingerprint(self) -> str:
        return self.service.get().voices.code_cache.directory.name

    def _encode(self, sample: bytes, transcript: str | None) -> tuple[np.ndarray, str | None]:
        """The clip's prompt codes by the model's codec, and the voice bank's notice (clip trimmed)."""
        resolved = self.service.get().voices.resolve(Voice.from_audio(sample, transcript=transcript))
        return resolved.codes, resolved.notice

    def voice(self, voice_id: str) -> tuple[Voice, str]:
        """`voice_id` as a request voice (its codes and transcript) and its label. Blocking."""
        library = self.library()
        try:
            saved = library.get(voice_id)
        except VoiceNotFoundError as exc:
            raise VoiceNotFoundError(exc.message, param="voice", code=exc.code) from None
        codes = library.codes(voice_id, self.fingerprint, lambda sample, text: self._encode(sample, text)[0])
        return Voice.from_codes(codes, transcript=saved.transcript), saved.id

    def listing(self) -> list[dict]:
        """The page's "My voices": id, name, language, transcript, clip URL."""
        return [voice_info(v).model_dump(include={"id", "name", "language", "transcript", "sample_url",
                                                  "sample_seconds"})
                for v in self.library().list()]

    def create(self, *, name: str, sample: bytes, transcript: str | None, language: str | None,
               consent: str | None, window: str | None = None) -> tuple[SavedVoice, ClipAnalysisInfo]:
        """Check, analyse, encode and save a clip (cut to `window` unless it is 'full' or omitted).
        Blocking (decodes and runs the codec). Returns the voice and the clip doctor's analysis."""
        name = sanitize_name(name)  # the cheap checks first: nothing is decoded for a bad form
        if language is not None and language not in LANGUAGES:
            raise InvalidRequestError(f"language must be one of {', '.join(LANGUAGES)} or omitted",
                                      param="language")
        if transcript is not None and len(transcript) > self.settings.max_text_chars:
            raise InvalidRequestError(f"transcript is {len(transcript)} characters; the limit is "
                                      f"{self.settings.max_text_chars}", param="transcript")
        info = check_clip(sample, self.settings, param=SAMPLE_PARAM)
        checked = clip_report.check(sample)  # the doctor reports; only the hard limits above refuse
        chosen = clip_report.windowed(checked, clip_report.parse_window(window, info.seconds))
        if chosen is not None:
            sample = chosen
            info = check_clip(sample, self.settings, param=SAMPLE_PARAM)
        try:
            codes, notice = self._encode(sample, transcript)
        except InvalidRequestError as exc:  # the bank names the clip ref_audio; here it is audio_sample
            if exc.param != "ref_audio":
                raise
            raise type(exc)(exc.message.replace("reference audio", SAMPLE_PARAM), param=SAMPLE_PARAM,
                            code=exc.code) from None
        if notice:
            logger.info("saving voice %r: %s", name, notice)
        seconds = min(info.seconds, len(codes) * SAMPLES_PER_FRAME / SAMPLE_RATE_HZ)  # what the voice actually holds
        saved = self.library().add(name=name, sample=sample, codes=codes, fingerprint=self.fingerprint,
                                   sample_seconds=seconds, transcript=transcript, language=language,
                                   consent=consent)
        return saved, checked.info()


def build_voices_router(saved: SavedVoices, settings: ServerSettings) -> APIRouter:
    router = APIRouter(tags=["Voice library"])
    errors = {400: {"model": ErrorResponse}, 404: {"model": ErrorResponse}, 413: {"model": ErrorResponse},
              503: {"model": ErrorResponse}}

    @router.post("/v1/audio/voices", response_model=SavedVoiceInfo, responses=errors, summary="Save a voice")
    async def create_voice(
        name: Annotated[str, Form(description="Display name (sanitised: letters, digits, spaces, - _ . , ' ( ) & +).")],
        audio_sample: Annotated[UploadFile, File(description="3-30 s of one speaker: WAV, FLAC, OGG or MP3.")],
        transcript: Annotated[str | None, Form(description="What the clip says; the voice then speaks in "
                                                           "continuation mode (it continues the clip).")] = None,
        language: Annotated[str | None, Form(description="zh, en or ja (shown in the page; optional).")] = None,
        consent: Annotated[str | None, Form(description="OpenAI's consent id; recorded, not verified here.")] = None,
        kind: Annotated[str | None, Form(alias="type", description="OpenAI's creation method: only 'audio_sample'.")]
        = None,
        window: Annotated[str | None, Form(description="Which part of the clip to clone: 'full' (the default), "
                                                       "'auto' (the clip doctor's window, see `analysis`) or "
                                                       "'start,end' in seconds.")] = None,
    ) -> SavedVoiceInfo:
        if kind not in (None, "", "audio_sample"):
            raise InvalidRequestError(f"type {kind[:40]!r} is not supported: this server clones voices from an "
                                      "audio_sample only (send type 'audio_sample' or omit it)", param="type")
        sample = await audio_sample.read(settings.max_upload_bytes + 1)
        voice, analysis = await anyio.to_thread.run_sync(lambda: saved.create(
            name=name, sample=sample, transcript=transcript, language=language or None, consent=consent,
            window=window))
        return voice_info(voice, analysis)

    @router.get("/v1/audio/voices", response_model=SavedVoiceList, responses=errors, summary="Saved voices")
    def list_voices() -> SavedVoiceList:
        return SavedVoiceList(data=[voice_info(v) for v in saved.library().list()])

    @router.get("/v1/audio/voices/{voice_id}", response_model=SavedVoiceInfo, responses=errors,
                summary="One saved voice")
    def get_voice(voice_id: str) -> SavedVoiceInfo:
        return voice_info(saved.library().get(voice_id))

    @router.get("/v1/audio/voices/{voice_id}/sample", response_class=Response, responses=errors,
                summary="A saved voice's clip")
    def get_sample(voice_id: str) -> Response:
        data = saved.library().sample(voice_id)
        return Response(data, media_type=sniff_bytes(data), headers={"Cache-Control": "no-store"})

    @router.delete("/v1/audio/voices/{voice_id}", response_model=DeletedVoice, responses=errors,
                   summary="Delete a saved voice")
    def delete_voice(voice_id: str) -> DeletedVoice:
        return DeletedVoice(id=saved.library().delete(voice_id).id)

    return router


def sniff_bytes(data: bytes) -> str:
    return {"wav": "audio/wav", "flac": "audio/flac", "ogg": "audio/ogg", "mp3": "audio/mpeg"}.get(
        sniff_container(data) or "", "application/octet-stream")
