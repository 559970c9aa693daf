"""The saved-voice library: `voices/library.py` on disk, and `/v1/audio/voices` across a real restart.

The HTTP test runs `python app.py` (tiny checkpoints) twice on the same cache dir: a voice saved
through the official `openai` SDK and through raw multipart is listed, speaks in both speech routes,
and is still there, with the same audio, after the server restarts.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from support.e2e_helpers import free_port
from support.replica_helpers import start_replica
from support.server_helpers import wait_until_ready

from bench.lib.player_stream import parse_frames
from tts_core.errors import InvalidRequestError, PayloadTooLargeError, VoiceNotFoundError
from tts_core.voices.library import VoiceLibrary, is_voice_id, sanitize_name

CODES = np.arange(32, dtype=np.int64).reshape(2, 16)


def _library(tmp_path: Path, **limits) -> VoiceLibrary:
    return VoiceLibrary(tmp_path / "library", **limits)


def _add(library: VoiceLibrary, name: str = "Narrator", **fields):
    defaults = {"sample": b"RIFF-sample-bytes", "codes": CODES, "fingerprint": "codec-a", "sample_seconds": 4.2}
    return library.add(name=name, **{**defaults, **fields})


# ---- the library on disk ------------------------------------------------------------------------


def test_add_list_get_delete(tmp_path: Path) -> None:
    library = _library(tmp_path)
    assert library.list() == []
    first = _add(library, transcript="  Hello.  ", language="en", consent="cons_123")
    second = _add(library, "Second voice")
    assert is_voice_id(first.id) and first.id != second.id
    assert [v.id for v in library.list()] == [first.id, second.id]
    assert library.get(first.id).transcript == "Hello." and library.get(first.id).language == "en"
    np.testing.assert_array_equal(library.codes(first.id, "codec-a"), CODES)
    assert library.sample(first.id) == b"RIFF-sample-bytes"
    again = VoiceLibrary(tmp_path / "library")  # another process, or a restart: the same voices
    assert [v.name for v in again.list()] == ["Narrator", "Second voice"]
    assert library.delete(first.id).name == "Narrator"
    assert [v.id for v in again.list()] == [second.id]
    with pytest.raises(VoiceNotFoundError):
        library.get(first.id)
    with pytest.raises(VoiceNotFoundError):
        library.delete(first.id)
    assert not any(p.name.startswith(".") for p in (tmp_path / "library").iterdir())  # no staging left


def test_limits(tmp_path: Path) -> None:
    library = _library(tmp_path, max_voices=2, max_sample_bytes=100)
    _add(library)
    _add(library)
    with pytest.raises(InvalidRequestError) as full:
        _add(library)
    assert full.value.code == "voice_limit_reached" and "DELETE" in full.value.message
    library.delete(library.list()[0].id)
    _add(library)  # room again
    with pytest.raises(PayloadTooLargeError) as big:
        VoiceLibrary(tmp_path / "other", max_sample_bytes=10).add(
            name="x", sample=b"0" * 11, codes=CODES, fingerprint="codec-a", sample_seconds=1)
    assert big.value.param == "audio_sample"
    with pytest.raises(InvalidRequestError) as lang:
        _add(_library(tmp_path / "l"), language="xx")
    assert lang.value.param == "language"


@pytest.mark.parametrize(("raw", "clean"), [
    ("  My   voice ", "My voice"),
    ("<script>alert(1)</script>", "script alert(1) script"),
    ("../../etc/passwd", ".. .. etc passwd"),
    ("Zoë ☆ 小明\n\t", "Zoë 小明"),
    ("a" * 100, "a" * 64),
])
def test_names_are_sanitised(raw: str, clean: str) -> None:
    assert sanitize_name(raw) == clean


@pytest.mark.parametrize("raw", ["", "   ", "<>/\\", "☆☆", 5])
def test_empty_or_symbol_only_names_are_refused(raw) -> None:
    with pytest.raises(InvalidRequestError) as err:
        sanitize_name(raw)
    assert err.value.param == "name"


@pytest.mark.parametrize("bad_id", ["voice_123", "../voice_0123456789abcdef01234567", "voice_0123456789ABCDEF01234567",
                                    "voice_0123456789abcdef01234567/..", ""])
def test_ids_are_checked_before_any_path_is_built(tmp_path: Path, bad_id: str) -> None:
    library = _library(tmp_path)
    _add(library)
    for call in (library.get, library.delete, library.sample):
        with pytest.raises(VoiceNotFoundError):
            call(bad_id)


def test_damaged_entries_are_skipped(tmp_path: Path) -> None:
    library = _library(tmp_path)
    good = _add(library)
    broken = _add(library, "Broken")
    (library.directory / broken.id / "voice.json").write_text("{not json")
    (library.directory / "voice_ffffffffffffffffffffffff").mkdir()  # no metadata at all
    assert [v.id for v in library.list()] == [good.id]
    with pytest.raises(VoiceNotFoundError):
        library.get(broken.id)


def test_another_codec_re_encodes_the_saved_clip_once(tmp_path: Path) -> None:
    library = _library(tmp_path)
    voice = _add(library, transcript="Hi.")
    calls = []

    def encode(sample: bytes, transcript: str | None) -> np.ndarray:
        calls.append((sample, transcript))
        return CODES[::-1].copy()

    np.testing.assert_array_equal(library.codes(voice.id, "codec-b", encode), CODES[::-1])
    np.testing.assert_array_equal(library.codes(voice.id, "codec-b", encode), CODES[::-1])  # kept on disk
    assert calls == [(b"RIFF-sample-bytes", "Hi.")]
    np.testing.assert_array_equal(library.codes(voice.id, "codec-a"), CODES)
    with pytest.raises(VoiceNotFoundError):
        library.codes(voice.id, "codec-c")  # no encoder given: cannot make codes
    meta = json.loads((library.directory / voice.id / "voice.json").read_text())
    assert meta["id"] == voice.id and meta["sample_bytes"] == len(b"RIFF-sample-bytes")


# ---- over HTTP, across a restart ------------------------------------------------------------------


def _clip(data_dir: Path, start_s: float = 0.5, seconds: float = 2.0) -> bytes:
    audio, rate = sf.read(data_dir / "presets" / "en_2.wav", dtype="float32", always_2d=True)
    piece = audio[int(start_s * rate) : int((start_s + seconds) * rate)]
    out = io.BytesIO()
    sf.write(out, piece, rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


class _App:
    def __init__(self, process, url: str, log_path: Path):
        self.process, self.url, self.log_path = process, url, log_path

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()

    def log_tail(self, num_chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-num_chars:]


def _speak(client: httpx.Client, voice: str) -> np.ndarray:
    resp = client.post("/v1/audio/speech", json={"input": "Saved voices speak.", "voice": voice,
                                                  "response_format": "pcm", "seed": 5, "max_frames": 4})
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-voice"] == voice
    return np.frombuffer(resp.content, "<i2")


@pytest.mark.slow
@pytest.mark.e2e
def test_voice_library_over_http_survives_a_restart(data_dir: Path, tmp_path: Path) -> None:
    cache, port = tmp_path / "cache", free_port()
    url = f"http://127.0.0.1:{port}"
    clip = _clip(data_dir)
    with start_replica(data_dir, cache, tmp_path / "first.log", port) as process:
        wait_until_ready(_App(process, url, tmp_path / "first.log"), 150)
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        made = sdk.audio.voices.create(name="  My <b>narrator</b> ", audio_sample=("me.wav", clip, "audio/wav"),
                                       consent="cons_local")
        assert made.object == "audio.voice" and made.type == "audio_sample" and made.name == "My b narrator b"
        with httpx.Client(base_url=url, timeout=120) as client:
            raw = client.post("/v1/audio/voices", data={"name": "Continues", "transcript": "A short clip.",
                                                        "language": "en"},
                              files={"audio_sample": ("c.wav", _clip(data_dir, 3.0), "audio/wav")})
            assert raw.status_code == 200, raw.text
            continued = raw.json()
            assert continued["transcript"] == "A short clip." and continued["id"].startswith("voice_")
            listed = client.get("/v1/audio/voices").json()
            assert listed["object"] == "list" and [v["id"] for v in listed["data"]] == [made.id, continued["id"]]
            assert client.get(f"/v1/audio/voices/{made.id}").json()["name"] == made.name
            sample = client.get(f"/v1/audio/voices/{made.id}/sample")
            assert sample.status_code == 200 and sample.content == clip
            saved_in_page = client.get("/api/voices").json()["saved"]
            assert [v["id"] for v in saved_in_page] == [made.id, continued["id"]]
            before = _speak(client, made.id)
            continued_audio = _speak(client, continued["id"])  # continuation mode, from its transcript
            assert len(before) > 0 and len(continued_audio) > 0
            via_sdk = sdk.audio.speech.create(model="moss-tts-nano", input="Saved voices speak.",
                                              voice={"id": made.id}, response_format="pcm",
                                              extra_body={"seed": 5, "max_frames": 4})
            assert np.array_equal(np.frombuffer(via_sdk.content, "<i2"), before)  # bit for bit
            page = client.post("/api/tts/stream", json={"text": "Saved voices speak.", "voice": made.id,
                                                        "seed": 5, "max_frames": 4, "transport": "s16"})
            assert page.status_code == 200
            audio = b"".join(payload for kind, payload in parse_frames(page.content) if kind == 0)
            assert np.array_equal(np.frombuffer(audio, "<i2"), before)  # the same 16-bit samples
            _library_errors(client)
    assert list((cache / "voices" / "library").glob("voice_*/codes-*.npy")), "codes are kept under the cache dir"

    with start_replica(data_dir, cache, tmp_path / "second.log", port) as process:  # the same server, restarted
        wait_until_ready(_App(process, url, tmp_path / "second.log"), 150)
        with httpx.Client(base_url=url, timeout=120) as client:
            assert [v["id"] for v in client.get("/v1/audio/voices").json()["data"]] == [made.id, continued["id"]]
            after = _speak(client, made.id)
            assert np.array_equal(after, before)  # a restarted server: the same audio, bit for bit
            sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
            deleted = sdk.audio.voices.delete(made.id)
            assert deleted.deleted and deleted.id == made.id and deleted.object == "audio.voice.deleted"
            gone = client.post("/v1/audio/speech", json={"input": "x", "voice": made.id})
            assert gone.status_code == 404 and gone.json()["error"]["param"] == "voice"
            assert client.delete(f"/v1/audio/voices/{made.id}").status_code == 404
            assert [v["id"] for v in client.get("/api/voices").json()["saved"]] == [continued["id"]]


def _library_errors(client: httpx.Client) -> None:
    """Bad creations are refused with OpenAI's error shape, naming the field."""
    wav = {"audio_sample": ("a.wav", b"RIFF\x00\x00\x00\x00WAVEjunk" * 20, "audio/wav")}
    cases = [
        ({"name": "<>/"}, {"audio_sample": ("a.wav", b"x" * 100, "audio/wav")}, 400, "name"),
        ({"name": "ok"}, wav, 400, "audio_sample"),
        ({"name": "ok"}, {"audio_sample": ("a.txt", b"plain text, not audio" * 10, "text/plain")}, 400, "audio_sample"),
        ({"name": "ok"}, None, 400, "audio_sample"),
        ({"name": "ok", "type": "prompt"}, wav, 400, "type"),
        ({"name": "ok", "language": "fr"}, None, 400, None),
    ]
    for data, files, status, param in cases:
        resp = client.post("/v1/audio/voices", data=data, files=files)
        assert resp.status_code == status, (data, resp.text)
        error = resp.json()["error"]
        assert error["message"] and "Traceback" not in resp.text and "/tmp" not in resp.text
        if param:
            assert error["param"] == param, (data, error)
    for bad in ("voice_123", "nobody", "voice_0123456789abcdef01234567"):
        resp = client.get(f"/v1/audio/voices/{bad}")
        assert resp.status_code == 404 and resp.json()["error"]["param"] == "voice_id"
