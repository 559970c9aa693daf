"""Deepgram's TTS WebSocket protocol, v1 (`/v1/speak`), over the text-in core (docs/API.md, "Voice agents").

Handshake query: `model` (a preset, a saved voice id or an OpenAI voice name; Deepgram's own `aura*`
names speak the default voice), `encoding` (`linear16`, `mulaw`, `alaw`; default linear16),
`sample_rate` (default 24000), `container` (`none` only). A bad one refuses the handshake (400 or 404,
with the error as JSON).

Client -> server: `{"type": "Speak", "text"}` adds text, spoken as clauses and sentences complete;
`{"type": "Flush"}` speaks what is buffered now and answers `{"type": "Flushed", "sequence_id"}` right
after its audio (Pipecat takes it as the end of the turn); `{"type": "Clear"}` (barge-in) drops
everything not yet sent, cancels the stream and answers `{"type": "Cleared", "sequence_id"}`;
`{"type": "Close"}` closes the socket once the audio is out. Server -> client: `Metadata` first, then
the audio as binary messages (raw mono samples), and `{"type": "Warning", "warn_code", "warn_msg"}`
for a message it could not take (the socket stays open). No timestamps (Deepgram sends none).

One utterance at a time per socket: a context of the core that lives until Clear or Close.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from starlette.datastructures import QueryParams

from tts_core.audio.encoders import check_rate
from tts_core.errors import InvalidRequestError, TTSError
from tts_core.speaking import Piece, SpeechContext
from tts_core.types import SynthesisRequest

from ..api.openai_schemas import OPENAI_VOICES
from ..api.requests import Dialect, Fields, prepare
from ..delivery.speech_output import OutputSpec, SpeechRender
from .connection import AgentConnection
from .starter import piece_starter
from .writer import PieceWriter

ENCODINGS = {"linear16": "pcm", "mulaw": "mulaw", "alaw": "alaw"}
DEEPGRAM = Dialect(names={"text": "text", "voice": "model"}, too_long_code="text_too_long",
                   preset_aliases=OPENAI_VOICES)


def _json(kind: str, **fields) -> str:
    return json.dumps({"type": kind, **fields}, ensure_ascii=False, separators=(",", ":"))


def warning(_context_id: str | None, exc: TTSError) -> str:
    return _json("Warning", warn_code=exc.code or "invalid_message", warn_msg=exc.message)


def is_audio(message: str | bytes) -> bool:
    return isinstance(message, bytes)


@dataclass(frozen=True, slots=True)
class SpeakSettings:
    voice: str | None
    model: str
    output: OutputSpec


def speak_settings(query: QueryParams) -> SpeakSettings:
    """The handshake's query, checked (errors name the parameter)."""
    model = query.get("model", "").strip()
    encoding = query.get("encoding", "linear16")
    if encoding not in ENCODINGS:
        raise InvalidRequestError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding[:40]!r}",
                                  param="encoding")
    container = query.get("container", "none")
    if container != "none":
        raise InvalidRequestError(f"container must be 'none' on this socket, got {container[:40]!r}", param="container")
    rate_text = query.get("sample_rate", "24000")
    rate = int(rate_text) if rate_text.isdigit() else 0
    if check_rate("pcm", rate):
        raise InvalidRequestError(f"sample_rate must be 8000, 16000, 22050, 24000, 44100 or 48000 (or 12000, 32000), "
                                  f"got {rate_text[:20]!r}", param="sample_rate")
    voice = None if not model or model.lower().startswith("aura") else model
    return SpeakSettings(voice, model or "aura", OutputSpec(ENCODINGS[encoding], rate, 1, captions=True))


async def prepared_request(settings: SpeakSettings, *, synth, server_settings, saved) -> SynthesisRequest:
    """The voice checked and resolved once for the socket, as any request's (`requests.prepare`)."""
    fields = Fields(text="Hello.", voice=settings.voice)  # the text stands in for what will come
    return (await prepare(fields, DEEPGRAM, synth=synth, settings=server_settings, saved=saved.voice)).request


class DeepgramWriter(PieceWriter):
    """One utterance's chunks -> binary audio and `Flushed` (see `writer.PieceWriter`)."""

    def __init__(self, render: SpeechRender, context: SpeechContext, sequence_base: int):
        super().__init__(render, context)
        self.sequence_base = sequence_base  # flushes of the socket before this utterance

    def audio(self, data: bytes, flush_id: int) -> list[bytes]:
        return [data]

    def reports(self, piece: Piece, span: tuple[float, float] | None) -> list[str]:
        return [_json("Flushed", sequence_id=self.sequence_base + flush_id - 1) for flush_id in piece.flush_ids]


class DeepgramHandler:
    """Handles one socket's messages (an instance per socket; see the module docstring)."""

    def __init__(self, *, synth, base: SynthesisRequest, settings: SpeakSettings, metrics):
        self.synth = synth
        self.base = base
        self.settings = settings
        self.metrics = metrics
        self.context_id: str | None = None
        self.context: SpeechContext | None = None
        self.flushes = 0  # Flush messages so far (the next Flushed's sequence id)
        self.clears = 0

    async def __call__(self, conn: AgentConnection, text: str) -> None:
        try:
            try:
                message = json.loads(text)
            except ValueError as exc:
                raise InvalidRequestError(f"the message is not JSON: {exc}", code="invalid_json") from None
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "Speak":
                spoken = message.get("text")
                if not isinstance(spoken, str):
                    raise InvalidRequestError("Speak needs a text string", param="text")
                self._current(conn).push(spoken)
            elif kind == "Flush":
                sequence = self.flushes
                self.flushes += 1
                if self.context is None or self.context.ended:
                    await conn.send(_json("Flushed", sequence_id=sequence))
                else:
                    self.context.flush()
            elif kind == "Clear":
                if self.context_id is not None:
                    conn.cancel(self.context_id)
                self.context = self.context_id = None
                await conn.send(_json("Cleared", sequence_id=self.clears))
                self.clears += 1
            elif kind == "Close":
                if self.context is not None and self.context_id is not None:
                    self.context.end_input()
                    await conn.finished(self.context_id)
                await conn.close(1000, "closed by the client")
            else:
                raise InvalidRequestError("type must be Speak, Flush, Clear or Close", param="type",
                                          code="invalid_message")
        except TTSError as exc:
            await conn.send_error(None, exc)

    def _current(self, conn: AgentConnection) -> SpeechContext:
        """The socket's utterance, opened on the first Speak (and after a Clear)."""
        if self.context is not None and not self.context.ended:
            return self.context
        self.context_id = uuid.uuid4().hex
        # Flush ids count within an utterance; the socket's sequence ids go on across utterances.
        context = conn.session.open(self.context_id, piece_starter(self.synth, self.base, self.metrics),
                                    max_delay_s=None)
        if self.metrics is not None:
            self.metrics.agent_contexts.labels("deepgram").inc()
        conn.deliver(self.context_id, context, DeepgramWriter(SpeechRender(self.settings.output), context, self.flushes),
                     is_audio=is_audio)
        self.context = context
        return context


def metadata(settings: SpeakSettings, model_name: str) -> str:
    return _json("Metadata", request_id=str(uuid.uuid4()), model_name=settings.model, model_version=model_name,
                 model_uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, model_name)))
