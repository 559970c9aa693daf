"""The Cartesia-compatible voice-agent socket (`/tts/websocket`) through a real server and socket:
continuations, interleaved contexts, cancel, flush, output formats, bad input and limits. Events are
counted, never timed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.server_helpers import tiny_api_server, wait_for_idle
from websockets.sync.client import connect

from studio.flags import parse_config
from tts_core.config import EngineConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FORMAT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}


@pytest.fixture(scope="module")
def agent_url(data_dir: Path, tmp_path_factory) -> str:
    with tiny_api_server(data_dir, tmp_path_factory.mktemp("voice_cache"),
                         EngineConfig(max_active_streams=2, max_queue=8)) as url:
        yield url


def _socket(url: str):
    return connect(url.replace("http", "ws", 1) + "/tts/websocket?cartesia_version=2025-04-16", max_size=None)


def _request(context_id: str | None, transcript: str, more: bool, **extra) -> str:
    message = {"model_id": "sonic-3", "voice": {"mode": "id", "id": "alloy"}, "output_format": FORMAT,
               "language": "en", "add_timestamps": True, "transcript": transcript, "continue": more, **extra}
    if context_id is not None:
        message["context_id"] = context_id
    return json.dumps(message)


def _until_done(ws, context_ids: set[str]) -> list[dict]:
    """Messages until every context in `context_ids` sent `done` (errors fail the test)."""
    messages, waiting = [], set(context_ids)
    while waiting:
        message = json.loads(ws.recv(timeout=120))
        assert message["type"] != "error", message
        messages.append(message)
        if message["type"] == "done":
            waiting.discard(message["context_id"])
    return messages


def _audio(messages: list[dict], context_id: str) -> bytes:
    return b"".join(base64.b64decode(m["data"]) for m in messages if m["type"] == "chunk"
                    and m["context_id"] == context_id)


def _words(messages: list[dict], context_id: str) -> tuple[list[str], list[float], list[float]]:
    words, starts, ends = [], [], []
    for m in messages:
        if m["type"] == "timestamps" and m["context_id"] == context_id:
            assert m["estimated"] is True
            words += m["word_timestamps"]["words"]
            starts += m["word_timestamps"]["start"]
            ends += m["word_timestamps"]["end"]
    return words, starts, ends


def _health(url: str) -> dict:
    return httpx.get(url + "/health", timeout=10).json()


def _error(ws) -> dict:
    message = json.loads(ws.recv(timeout=30))
    assert message["type"] == "error", message
    return message


def test_continuations_across_messages_speak_one_utterance_with_estimated_word_times(agent_url):
    with _socket(agent_url) as ws:
        ws.send(_request("c1", "Hello", True))
        ws.send(_request("c1", " there,", True))
        ws.send(_request("c1", " friend.", True))
        ws.send(_request("c1", "", False))
        messages = _until_done(ws, {"c1"})
    assert messages[-1] == {"type": "done", "context_id": "c1", "done": True, "status_code": 206}
    assert all(m["context_id"] == "c1" for m in messages)
    audio = _audio(messages, "c1")
    assert audio and len(audio) % 2 == 0
    words, starts, ends = _words(messages, "c1")
    assert words == ["Hello", "there,", "friend."]
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends))
    seconds = len(audio) / 2 / FORMAT["sample_rate"]
    assert 0 < ends[-1] <= seconds + 0.01  # the words lie within the audio sent


def test_two_contexts_interleaved_each_get_their_own_audio_and_words(agent_url):
    with _socket(agent_url) as ws:
        ws.send(_request("a", "Apples", True))
        ws.send(_request("b", "Bananas", True))
        ws.send(_request("a", " are red.", False))
        ws.send(_request("b", " are yellow.", False))
        messages = _until_done(ws, {"a", "b"})
    assert _words(messages, "a")[0] == ["Apples", "are", "red."]
    assert _words(messages, "b")[0] == ["Bananas", "are", "yellow."]
    assert _audio(messages, "a") and _audio(messages, "b")
    assert sum(m["type"] == "done" for m in messages) == 2


def test_cancel_stops_a_context_at_once_and_frees_its_slot(agent_url):
    with _socket(agent_url) as ws:
        ws.send(_request("long", "This sentence goes on and on, and on and on, for a long while yet.", False))
        first = json.loads(ws.recv(timeout=120))
        assert first["type"] == "chunk" and first["context_id"] == "long"
        ws.send(json.dumps({"context_id": "long", "cancel": True}))
        ws.send(_request("long", " Text already on its way is dropped.", False))  # a cancelled id stays cancelled
        ws.send(_request("next", "Next.", False))
        after, seen_next = [], False
        for message in _until_done(ws, {"next"}):
            seen_next = seen_next or message["context_id"] == "next"
            if seen_next:
                after.append(message)
    assert after and all(m["context_id"] == "next" for m in after)  # nothing of "long" once the cancel was read
    health = wait_for_idle(lambda: _health(agent_url), 30)
    assert health["active_streams"] == 0
    metrics = httpx.get(agent_url + "/metrics", timeout=10).text
    assert 'tts_agent_cancels_total{protocol="cartesia"}' in metrics


def test_flush_speaks_what_is_buffered_and_answers_after_its_audio(agent_url):
    with _socket(agent_url) as ws:
        ws.send(_request("f", "No boundary here", True, flush=True, max_buffer_delay_ms=5000))
        ws.send(_request("f", " and more.", False))
        messages = _until_done(ws, {"f"})
    kinds = [m["type"] for m in messages]
    flush_at = kinds.index("flush_done")
    assert messages[flush_at]["flush_id"] == 1
    chunks = [m for m in messages if m["type"] == "chunk"]
    assert {m["flush_id"] for m in messages[:flush_at] if m["type"] == "chunk"} == {1}
    assert chunks[-1]["flush_id"] == 2  # the text after the flush
    assert _words(messages, "f")[0] == ["No", "boundary", "here", "and", "more."]


@pytest.mark.parametrize("encoding, rate, width", [("pcm_f32le", 16000, 4), ("pcm_mulaw", 8000, 1),
                                                   ("pcm_alaw", 8000, 1), ("pcm_s16le", 44100, 2)])
def test_output_formats_carry_the_asked_samples(agent_url, encoding, rate, width):
    output = {"container": "raw", "encoding": encoding, "sample_rate": rate}
    with _socket(agent_url) as ws:
        ws.send(_request(None, "One two.", False, output_format=output))  # no id: a context of its own
        message = json.loads(ws.recv(timeout=120))
        context_id = message["context_id"]
        messages = [message, *_until_done(ws, {context_id})]
    audio = _audio(messages, context_id)
    assert len(audio) % width == 0
    seconds = len(audio) / width / rate
    assert 0 < _words(messages, context_id)[2][-1] <= seconds + 0.01
    if encoding == "pcm_f32le":
        samples = np.frombuffer(audio, "<f4")
        assert np.isfinite(samples).all()


def test_bad_messages_get_errors_and_the_socket_stays_usable(agent_url):
    with _socket(agent_url) as ws:
        ws.send("not json")
        assert _error(ws)["code"] == "invalid_json"
        ws.send("[1, 2]")
        assert _error(ws)["code"] == "invalid_message"
        ws.send(b"\x00\x01")
        assert _error(ws)["code"] == "invalid_message"
        ws.send(_request("x", "Hi.", False, output_format={"container": "raw", "encoding": "mp3",
                                                           "sample_rate": 24000}))
        error = _error(ws)
        assert (error["param"], error["context_id"], error["status_code"]) == ("output_format.encoding", "x", 400)
        ws.send(_request("y", "Hi.", False, voice={"mode": "id", "id": "nobody-by-this-name"}))
        error = _error(ws)
        assert error["param"] == "voice" and error["status_code"] == 404
        ws.send(_request("z", "Hi.", False, model_id="eleven_turbo"))
        assert _error(ws)["param"] == "model_id"
        ws.send(json.dumps({"cancel": True}))
        assert _error(ws)["param"] == "context_id"
        ws.send(_request("ok", "Fine.", False))
        assert _until_done(ws, {"ok"})[-1]["type"] == "done"


def test_limits_contexts_message_size_and_buffered_text(agent_url):
    with _socket(agent_url) as ws:
        for index in range(16):  # open, waiting for text: no engine slot held
            ws.send(_request(f"ctx{index}", "", True))
        ws.send(_request("one-too-many", "", True))
        assert _error(ws)["code"] == "too_many_contexts"
        ws.send("x" * (64 * 1024 + 1))
        assert _error(ws)["code"] == "message_too_large"
        ws.send(_request("ctx0", "word " * 4001, True))
        assert _error(ws)["code"] == "buffer_full"
        for index in range(16):
            ws.send(json.dumps({"context_id": f"ctx{index}", "cancel": True}))
        ws.send(_request("after", "Still fine.", False))
        assert _until_done(ws, {"after"})[-1]["context_id"] == "after"


def test_pieces_join_at_silence_with_the_pause_between_sentences(agent_url):
    output = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 48000}  # no resampling: exact samples
    with _socket(agent_url) as ws:
        ws.send(_request("j", "Hello there.", True, flush=True, output_format=output))  # piece 1: a sentence
        ws.send(_request("j", " Bye now.", False, output_format=output))  # piece 2
        messages = _until_done(ws, {"j"})
    audio = np.frombuffer(_audio(messages, "j"), "<i2").astype(np.int32)
    stamps = [m["word_timestamps"] for m in messages if m["type"] == "timestamps"]
    assert [s["words"] for s in stamps] == [["Hello", "there."], ["Bye", "now."]]
    silent = np.flatnonzero(audio == 0)
    runs = np.split(silent, np.flatnonzero(np.diff(silent) != 1) + 1)
    pause = max(runs, key=len)  # the silence between the pieces: 0.40 s after a short sentence
    assert len(pause) >= 0.40 * 48000
    assert abs(pause[0] / 48000 - stamps[0]["end"][-1]) < 0.01 and abs(pause[-1] / 48000 - stamps[1]["start"][0]) < 0.01
    loudest = np.abs(audio).max()
    # No step into or out of the silence: the pieces fade to it (the codec's own edges need not be quiet).
    assert abs(audio[pause[0] - 1]) <= 0.02 * loudest and abs(audio[pause[-1] + 1]) <= 0.02 * loudest


def test_the_api_key_flag_and_its_environment_twin(monkeypatch):
    monkeypatch.delenv("MOSS_TTS_API_KEY", raising=False)
    assert parse_config([]).server.api_key is None
    assert parse_config(["--api-key", "from-flag"]).server.api_key == "from-flag"
    monkeypatch.setenv("MOSS_TTS_API_KEY", "from-env")
    assert parse_config([]).server.api_key == "from-env"
