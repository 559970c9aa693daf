"""`studio.api.requests`: the one mapping of request bodies to SynthesisRequest, per API dialect.

Only the checks that come before a voice is resolved are driven here (no model needed); the HTTP
suites (test_openai_api, test_stream_route, test_reliability) drive the rest through the routes.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from support.reliability_common import run_coro
from support.voice_helpers import forbid_encoding, make_bank

from studio.api.openai_schemas import SpeechRequest
from studio.api.requests import (
    OPENAI,
    STREAM,
    PageForm,
    StreamBody,
    UploadStore,
    form_body,
    openai_fields,
    prepare,
    resolve_preset,
    stream_fields,
)
from studio.errors import ModelNotFoundError, ModelNotReadyError, http_status
from studio.settings import ServerSettings
from tts_core.errors import (
    InvalidRequestError,
    ModelLoadError,
    PayloadTooLargeError,
    QueueFullError,
    TTSError,
    VoiceNotFoundError,
    VoiceUnavailableError,
)

SETTINGS = ServerSettings(max_text_chars=20)


def _refusal(fields, dialect) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        run_coro(prepare(fields, dialect, synth=None, settings=SETTINGS, uploads=UploadStore()))
    return info.value


@pytest.mark.parametrize(("openai", "stream", "param", "code"), [
    ({"input": "  "}, {"text": "  "}, ("input", "text"), "empty_text"),
    ({"input": "x" * 21}, {"text": "x" * 21}, ("input", "text"), ("string_above_max_length", "text_too_long")),
    ({"input": "hi", "temperature": 0}, {"text": "hi", "audio_temperature": 0},
     ("temperature", "audio_temperature"), "out_of_range"),
    ({"input": "hi", "top_k": -1}, {"text": "hi", "audio_top_k": -1}, ("top_k", "audio_top_k"), "out_of_range"),
    ({"input": "hi", "ref_text": "words"}, {"text": "hi", "ref_text": "words"}, ("ref_text", "ref_text"), None),
])
def test_each_api_names_the_field_its_own_way(openai, stream, param, code) -> None:
    codes = code if isinstance(code, tuple) else (code, code)
    for fields, dialect, name, expected_code in ((openai_fields(SpeechRequest(**openai)), OPENAI, param[0], codes[0]),
                                                (stream_fields(StreamBody(**stream)), STREAM, param[1], codes[1])):
        exc = _refusal(fields, dialect)
        assert exc.param == name and exc.message.startswith(name) and exc.code == expected_code, exc.message
        assert http_status(exc) == (400, "invalid_request_error")


def test_the_rules_where_the_apis_differ() -> None:
    # The stream route refuses a voice next to a clip (before decoding it); OpenAI clients always
    # send a voice, so there the clip wins (checked by the HTTP suite) and nothing is refused here.
    both = StreamBody(text="hi", voice="Ava", ref_audio="UklGRg==")
    assert _refusal(stream_fields(both), STREAM).param == "voice"
    assert _refusal(stream_fields(StreamBody(text="hi", ref_audio="QUJD", ref_audio_id="abc")), STREAM).param == "ref_audio"
    greedy = SpeechRequest(input="hi", greedy=True, do_sample=True)
    assert _refusal(openai_fields(greedy), OPENAI).param == "greedy"
    expired = _refusal(stream_fields(StreamBody(text="hi", ref_audio_id="0" * 24)), STREAM)
    assert expired.param == "ref_audio_id" and expired.code == "upload_expired"
    with pytest.raises(ValidationError):
        StreamBody(text="hi", temprature=0.5)  # a typo is refused, never ignored


def test_page_form_becomes_the_stream_body_the_player_posts(tmp_path) -> None:
    uploads = UploadStore()
    knobs = (True, 0.7, 0.9, 20, 1.1, 1.0, 5, 2.0)
    preset = form_body(PageForm("Hello", *knobs, voice="Ava"), SETTINGS, uploads)
    assert preset == {"text": "Hello", "seed": 5, "max_frames": 25, "do_sample": True, "audio_temperature": 0.7,
                      "audio_top_p": 0.9, "audio_top_k": 20, "audio_repetition_penalty": 1.1,
                      "text_temperature": 1.0, "voice": "Ava"}
    assert stream_fields(StreamBody(**preset)).sampling["audio_repetition_penalty"] == 1.1
    with pytest.raises(InvalidRequestError) as missing:
        form_body(PageForm("Hello", *knobs, clone=True), SETTINGS, uploads)
    assert missing.value.param == "ref_audio"
    clip = tmp_path / "clip.wav"
    clip.write_bytes(b"RIFF....WAVE")
    cloned = form_body(PageForm("Hello", *knobs, clone=True, ref_path=str(clip), ref_text="  "), SETTINGS, uploads)
    assert "voice" not in cloned and cloned["ref_text"] is None
    assert uploads.get(cloned["ref_audio_id"]) == clip.read_bytes()  # stored once, sent by id


def test_http_status_is_decided_at_the_boundary() -> None:
    """The engine's errors carry no HTTP status; the web app maps each class (its nearest listed base)."""
    expected = [
        (InvalidRequestError("x"), (400, "invalid_request_error")),
        (VoiceNotFoundError("x"), (404, "invalid_request_error")),
        (ModelNotFoundError("x"), (404, "invalid_request_error")),
        (PayloadTooLargeError("x"), (413, "invalid_request_error")),
        (VoiceUnavailableError("x"), (400, "invalid_request_error")),  # a retry would not help
        (QueueFullError("x"), (503, "server_busy")),
        (ModelNotReadyError("x"), (503, "model_loading")),
        (ModelLoadError("x"), (500, "model_load_error")),
        (TTSError("x"), (500, "server_error")),
        (type("SomeNewInputError", (InvalidRequestError,), {})("x"), (400, "invalid_request_error")),
        (RuntimeError("x"), (500, "server_error")),
    ]
    for exc, status in expected:
        assert http_status(exc) == status, type(exc).__name__
        assert not hasattr(exc, "status_code") and not hasattr(exc, "error_type")


def test_a_voice_name_resolves_to_its_preset(tmp_path, data_dir):
    """By name in any case, an alias or nothing to the default; unknown names list the presets;
    a preset without its clip says so. (A real voice bank behind the three calls the route uses.)"""
    from types import SimpleNamespace

    bank = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=forbid_encoding)
    synth = SimpleNamespace(preset_info=bank.preset_info, list_voices=bank.list_presets,
                            default_voice=bank.default_voice, voices=bank)
    assert resolve_preset(synth, "cedar") == "Cedar"
    assert resolve_preset(synth, " HUTONG ") == "Hutong"
    assert resolve_preset(synth, "") == resolve_preset(synth, None) == bank.default_voice
    assert resolve_preset(synth, "Alloy", frozenset({"alloy"}), text="你好") == bank.default_voice
    assert resolve_preset(synth, "Alloy", frozenset({"alloy"}), text="Hello") == "Quill"  # English text
    assert resolve_preset(synth, "Alloy", frozenset({"alloy"}), text="こんにちは") == "Hoshi"
    with pytest.raises(VoiceNotFoundError) as info:
        resolve_preset(synth, "nobody")
    assert info.value.param == "voice" and "Cedar" in info.value.message and "/v1/voices" in info.value.message
    missing = next(p.name for p in bank.list_presets() if not p.available)
    with pytest.raises(VoiceUnavailableError) as info:
        resolve_preset(synth, missing.lower())
    assert info.value.param == "voice" and missing in info.value.message
