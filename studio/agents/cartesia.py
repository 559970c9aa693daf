"""Cartesia's TTS WebSocket protocol (`/tts/websocket`) over the text-in core (docs/API.md, "Voice agents").

Client -> server, JSON text messages:
- a generation request `{context_id, transcript, continue, [flush], model_id, voice: {mode: "id", id},
  output_format: {container: "raw", encoding, sample_rate}, [language], [add_timestamps],
  [max_buffer_delay_ms], [generation_config: {speed}]}`. The first message of a context id opens it
  with its settings (later messages' settings are ignored); transcripts are joined verbatim;
  `continue: false` ends the context's input; `flush: true` speaks what is buffered now and answers
  `flush_done` once that audio is out. A request without `context_id` is a context of its own.
- a cancel `{context_id, cancel: true}`: nothing more of that context is sent.

Server -> client: `chunk` (base64 audio, `flush_id`), `timestamps` (`word_timestamps`: words,
start, end in seconds of the context's audio, ESTIMATED: see `tts_core.speaking.words`; the
message says `"estimated": true`), `flush_done`, `done`, and `error` (`status_code`, `error`),
every one with its `context_id`. Errors leave the socket open.

Voices: a preset name, a saved voice id (`voice_...`), an OpenAI voice name, or a Cartesia voice id
(a UUID, which no voice here has): the last two speak the default voice. `language` is accepted and
not used (the text's language is detected); `model_id` may be any Cartesia `sonic*` name or this
server's model name.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass

from tts_core.audio.encoders import check_rate
from tts_core.audio.stretch import check_speed
from tts_core.errors import InvalidRequestError, TTSError
from tts_core.speaking import Piece, SpeechContext, estimate_word_times

from ..api.openai_schemas import MODEL_NAME, OPENAI_VOICES
from ..api.requests import Dialect, Fields, prepare
from ..delivery.speech_output import OutputSpec, SpeechRender
from ..errors import http_status
from .connection import AgentConnection
from .starter import piece_starter
from .writer import PieceWriter

ENCODINGS = {"pcm_s16le": "pcm", "pcm_f32le": "float32", "pcm_mulaw": "mulaw", "pcm_alaw": "alaw"}
MAX_CONTEXT_ID_CHARS = 128
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# The engine's field names as this protocol spells them (errors name the client's field).
CARTESIA = Dialect(names={"text": "transcript"}, too_long_code="transcript_too_long", preset_aliases=OPENAI_VOICES)


def _message(kind: str, context_id: str, **fields) -> str:
    return json.dumps({"type": kind, "context_id": context_id, **fields}, ensure_ascii=False, separators=(",", ":"))


def error_message(context_id: str | None, exc: TTSError) -> str:
    """Cartesia's error message (with the HTTP status the same error has on the HTTP API)."""
    status, _ = http_status(exc)
    fields = {"done": True, "status_code": status, "error": exc.message}
    if exc.param:
        fields["param"] = exc.param
    if exc.code:
        fields["code"] = exc.code
    return _message("error", context_id or "", **fields)


def is_audio(message: str | bytes) -> bool:
    return isinstance(message, str) and message.startswith('{"type":"chunk"')


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """What a context's first message fixes for its whole life."""

    voice: str | None
    output: OutputSpec
    timestamps: bool
    delay_s: float | None


def _field(message: dict, name: str, kind: type | tuple[type, ...], default=None):
    value = message.get(name, default)
    if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InvalidRequestError(f"{name} must be {names}, got {type(value).__name__}", param=name)
    return value


def output_spec(output_format: object, speed: float) -> OutputSpec:
    """`output_format` -> what SpeechRender makes: raw mono samples at the asked rate."""
    if not isinstance(output_format, dict):
        raise InvalidRequestError("output_format is required: {container: 'raw', encoding: 'pcm_s16le', "
                                  "sample_rate: 24000}", param="output_format")
    container = output_format.get("container", "raw")
    if container != "raw":
        raise InvalidRequestError(f"output_format.container must be 'raw' on this socket, got {container!r}",
                                  param="output_format.container")
    encoding = output_format.get("encoding")
    if encoding not in ENCODINGS:
        raise InvalidRequestError(f"output_format.encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}",
                                  param="output_format.encoding")
    rate = output_format.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, int) or check_rate("pcm", rate):
        raise InvalidRequestError(f"output_format.sample_rate must be 8000, 16000, 22050, 24000, 44100 or 48000 "
                                  f"(or 12000, 32000), got {rate!r}", param="output_format.sample_rate")
    return OutputSpec(ENCODINGS[encoding], rate, 1, speed, captions=True)


def context_settings(message: dict, model_name: str) -> ContextSettings:
    """Check a context's first message (every error names the field)."""
    model = _field(message, "model_id", str, "")
    if model and not (model.lower().startswith("sonic") or model.lower().startswith(model_name.lower())
                      or "moss-tts-nano" in model.lower()):
        raise InvalidRequestError(f"model_id {model[:80]!r} is not served here: use '{model_name}' "
                                  "(Cartesia's sonic model names are accepted as aliases)", param="model_id",
                                  code="model_not_found")
    voice = message.get("voice")
    voice_id = None
    if voice is not None:
        if not isinstance(voice, dict) or voice.get("mode", "id") != "id":
            raise InvalidRequestError("voice must be {mode: 'id', id: <preset name, saved voice id or OpenAI "
                                      "voice name>}; voice embeddings are not supported", param="voice")
        voice_id = voice.get("id")
        if voice_id is not None and not isinstance(voice_id, str):
            raise InvalidRequestError("voice.id must be a string", param="voice.id")
        if voice_id is not None and _UUID.fullmatch(voice_id.strip()):
            voice_id = None  # a Cartesia voice id: no such voice here, the default speaks
    _field(message, "language", str)
    timestamps = bool(_field(message, "add_timestamps", bool, False))
    delay_ms = _field(message, "max_buffer_delay_ms", (int, float))
    config = _field(message, "generation_config", dict) or {}
    speed = config.get("speed", 1.0) if isinstance(config, dict) else 1.0
    if isinstance(speed, bool) or not isinstance(speed, (int, float)):
        raise InvalidRequestError("generation_config.speed must be a number (0.25-4)", param="generation_config.speed")
    try:
        speed = check_speed(float(speed))
    except InvalidRequestError as exc:
        raise InvalidRequestError(exc.message.replace("speed", "generation_config.speed", 1),
                                  param="generation_config.speed") from None
    return ContextSettings(voice_id, output_spec(message.get("output_format"), speed), timestamps,
                           None if delay_ms is None else delay_ms / 1000)


class CartesiaWriter(PieceWriter):
    """One context's chunks -> Cartesia's messages (see `writer.PieceWriter`)."""

    def __init__(self, render: SpeechRender, context: SpeechContext, context_id: str, *, timestamps: bool):
        super().__init__(render, context)
        self.context_id = context_id
        self.timestamps = timestamps

    def audio(self, data: bytes, flush_id: int) -> list[str]:
        return [_message("chunk", self.context_id, data=base64.b64encode(data).decode(), done=False,
                         status_code=206, flush_id=flush_id)]

    def reports(self, piece: Piece, span: tuple[float, float] | None) -> list[str]:
        out = []
        if self.timestamps and span is not None:
            words = estimate_word_times(piece.text, *span)
            if words:
                out.append(_message("timestamps", self.context_id, done=False, status_code=206, estimated=True,
                                    word_timestamps={"words": [w.word for w in words],
                                                     "start": [w.start for w in words],
                                                     "end": [w.end for w in words]}))
        return out + [_message("flush_done", self.context_id, done=False, flush_done=True, flush_id=flush_id,
                               status_code=206) for flush_id in piece.flush_ids]

    def done(self) -> list[str]:
        return [_message("done", self.context_id, done=True, status_code=206)]


class CartesiaHandler:
    """Handles one socket's messages (an instance per socket; see the module docstring)."""

    def __init__(self, *, synth, settings, saved, metrics):
        self.synth = synth
        self.settings = settings
        self.saved = saved
        self.metrics = metrics

    async def __call__(self, conn: AgentConnection, text: str) -> None:
        context_id: str | None = None
        try:
            try:
                message = json.loads(text)
            except ValueError as exc:
                raise InvalidRequestError(f"the message is not JSON: {exc}", code="invalid_json") from None
            if not isinstance(message, dict):
                raise InvalidRequestError("a message must be a JSON object", code="invalid_message")
            context_id = _field(message, "context_id", str)
            if context_id is not None and not 0 < len(context_id) <= MAX_CONTEXT_ID_CHARS:
                raise InvalidRequestError(f"context_id must be 1 to {MAX_CONTEXT_ID_CHARS} characters",
                                          param="context_id")
            if message.get("cancel") is True:
                if context_id is None:
                    raise InvalidRequestError("a cancel needs the context_id to cancel", param="context_id")
                conn.cancel(context_id)
                return
            await self._generate(conn, message, context_id)
        except TTSError as exc:
            await conn.send_error(context_id, exc)

    async def _generate(self, conn: AgentConnection, message: dict, context_id: str | None) -> None:
        transcript = _field(message, "transcript", str, "")
        more = _field(message, "continue", bool, False)
        flush = _field(message, "flush", bool, False)
        if context_id is None:
            context_id = uuid.uuid4().hex
            if more:
                raise InvalidRequestError("continue: true needs a context_id for the next messages", param="context_id")
        if conn.session.was_cancelled(context_id):
            return  # text already on its way when the context was cancelled
        context = conn.session.get(context_id)
        if context is None:
            context = await self._open(conn, message, context_id, transcript)
        if transcript:
            context.push(transcript)
        if flush:
            context.flush()
        if not more:
            context.end_input()

    async def _open(self, conn: AgentConnection, message: dict, context_id: str, transcript: str) -> SpeechContext:
        settings = context_settings(message, MODEL_NAME)
        # The voice is checked and resolved once per context, as any request's is (`requests.prepare`);
        # the text stands in for the pieces to come (a context may start with none).
        fields = Fields(text=transcript.strip() or "Hello.", voice=settings.voice)
        prepared = await prepare(fields, CARTESIA, synth=self.synth, settings=self.settings, saved=self.saved.voice)
        context = conn.session.open(context_id, piece_starter(self.synth, prepared.request, self.metrics),
                                   max_delay_s=settings.delay_s)
        if self.metrics is not None:
            self.metrics.agent_contexts.labels("cartesia").inc()
        render = SpeechRender(settings.output)
        conn.deliver(context_id, context, CartesiaWriter(render, context, context_id, timestamps=settings.timestamps),
                     is_audio=is_audio)
        return context
