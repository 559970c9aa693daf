"""The Deepgram-compatible voice-agent socket (`/v1/speak`) through a real server and socket: the
handshake's checks, Speak/Flush as turns, Clear as barge-in, Close, bad messages. Events are counted."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from support.server_helpers import tiny_api_server, wait_for_idle
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import connect

from tts_core.config import EngineConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def speak_url(data_dir: Path, tmp_path_factory) -> str:
    with tiny_api_server(data_dir, tmp_path_factory.mktemp("voice_cache"),
                         EngineConfig(max_active_streams=2, max_queue=8)) as url:
        yield url


def _socket(url: str, query: str = "model=aura-2-thalia-en&encoding=linear16&sample_rate=16000"):
    return connect(url.replace("http", "ws", 1) + "/v1/speak?" + query, max_size=None)


def _turn(ws) -> tuple[int, dict]:
    """Audio bytes until the next control message (which is returned)."""
    audio = 0
    while True:
        message = ws.recv(timeout=120)
        if isinstance(message, bytes):
            audio += len(message)
            continue
        return audio, json.loads(message)


def test_speak_and_flush_make_a_turn_and_the_socket_goes_on(speak_url):
    with _socket(speak_url) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "Metadata"
        ws.send(json.dumps({"type": "Speak", "text": "Hello there,"}))
        ws.send(json.dumps({"type": "Speak", "text": " how are you"}))
        ws.send(json.dumps({"type": "Flush"}))
        audio, control = _turn(ws)
        assert audio > 0 and audio % 2 == 0 and control == {"type": "Flushed", "sequence_id": 0}
        ws.send(json.dumps({"type": "Speak", "text": "Second turn."}))
        ws.send(json.dumps({"type": "Flush"}))
        audio, control = _turn(ws)
        assert audio > 0 and control == {"type": "Flushed", "sequence_id": 1}
        ws.send(json.dumps({"type": "Close"}))
        with pytest.raises(ConnectionClosedOK):  # closed by the server once the audio is out
            while True:
                assert isinstance(ws.recv(timeout=30), bytes)


def test_clear_stops_the_audio_at_once_and_frees_the_slot(speak_url):
    with _socket(speak_url, "model=aura&encoding=mulaw&sample_rate=8000") as ws:
        ws.recv(timeout=30)  # Metadata
        ws.send(json.dumps({"type": "Speak", "text": "This goes on and on, and on and on, for a long while yet."}))
        ws.send(json.dumps({"type": "Flush"}))
        assert isinstance(ws.recv(timeout=120), bytes)  # speaking
        ws.send(json.dumps({"type": "Clear"}))
        ws.send(json.dumps({"type": "Speak", "text": "Okay."}))
        ws.send(json.dumps({"type": "Flush"}))
        # Audio already on the wire may still come before Cleared; after it, only the new turn.
        while not isinstance(message := ws.recv(timeout=120), str):
            pass
        assert json.loads(message) == {"type": "Cleared", "sequence_id": 0}
        audio, control = _turn(ws)
        assert audio > 0 and control == {"type": "Flushed", "sequence_id": 1}
    assert wait_for_idle(lambda: httpx.get(speak_url + "/health", timeout=10).json(), 30)["active_streams"] == 0


def test_a_flush_with_nothing_spoken_is_answered_at_once(speak_url):
    with _socket(speak_url) as ws:
        ws.recv(timeout=30)
        ws.send(json.dumps({"type": "Flush"}))
        assert json.loads(ws.recv(timeout=30)) == {"type": "Flushed", "sequence_id": 0}


def test_bad_messages_get_warnings_and_bad_handshakes_are_refused(speak_url):
    with _socket(speak_url) as ws:
        ws.recv(timeout=30)
        ws.send("nope")
        assert json.loads(ws.recv(timeout=30))["type"] == "Warning"
        ws.send(json.dumps({"type": "Shout"}))
        assert json.loads(ws.recv(timeout=30))["warn_code"] == "invalid_message"
        ws.send(json.dumps({"type": "Speak", "text": "Fine."}))
        ws.send(json.dumps({"type": "Flush"}))
        assert _turn(ws)[1]["type"] == "Flushed"
    for query, status in (("encoding=opus", 400), ("sample_rate=11", 400), ("model=nobody-by-this-name", 404)):
        with pytest.raises(InvalidStatus) as refused:
            _socket(speak_url, query)
        assert refused.value.response.status_code == status
