"""The player's transports on POST /api/tts/stream (`"transport"`: opus, the default, or s16) over
real HTTP against `python app.py` (tiny checkpoints), decoded with PyAV: exact lengths, the same
audio in either (Opus within an SNR floor), event frames with each, lossless downloads whatever
the wire carried, and float32 refused with the way to it.
"""

from __future__ import annotations

import io

import av
import httpx
import numpy as np
import pytest
import soundfile
import torch

from bench.lib.fidelity import snr_db as _snr_db
from bench.lib.player_stream import decode_ogg_opus, parse_frames, player_stream
from studio.delivery.speech_output import OutputSpec, SpeechRender
from studio.delivery.transports import OPUS_BIT_RATE
from tts_core.audio.encoders import StreamEncoder
from tts_core.audio.io import load_audio
from tts_core.types import AudioChunk, Timings

pytestmark = pytest.mark.e2e

SAMPLES_PER_FRAME = 3840
BODY = {"text": "First sentence here. Then a second one, a little longer.", "seed": 4, "max_frames": 12}
# The tiny checkpoints' "speech" is full-band noise peaking far over full scale (every 16-bit or
# Opus output clips it to [-1, 1]; a fifth of its energy lies above Opus's 20 kHz band), so against
# the clipped source a waveform SNR says only "the same signal, aligned" (about 4.6 dB here; a
# misaligned or wrong stream gives about 0 or less). The quality floor is set on real speech:
# a preset's reference clip at 160 kb/s measured 30.2 dB.
TINY_SNR_FLOOR_DB = 3.0
SPEECH_SNR_FLOOR_DB = 25.0
PRESET_CLIP = "presets/en_2.wav"


@pytest.fixture(scope="module")
def client(app_server):
    with httpx.Client(base_url=app_server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def s16(client) -> np.ndarray:
    """The 16-bit stream of BODY as the player decodes it: float32 [2, n]."""
    response = client.post("/api/tts/stream", json={**BODY, "transport": "s16"})
    assert response.status_code == 200, response.text
    assert response.headers["x-sample-format"] == "s16le" and response.headers["x-transport"] == "s16"
    pcm, events = player_stream(response.content, "s16le")
    assert pcm.shape == (2, 12 * SAMPLES_PER_FRAME) and events[-1]["type"] == "speech.done"
    return pcm


def ogg_packets(data: bytes) -> list[bytes]:
    with av.open(io.BytesIO(data), format="ogg") as container:
        return [bytes(packet) for packet in container.demux(audio=0) if packet.size]


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    return _snr_db(torch.from_numpy(np.array(reference)), torch.from_numpy(np.array(test)))


def kept_wav(client, request_id: str) -> np.ndarray:
    """The result the server kept for `request_id`, as its 16-bit WAV download: float32 [2, n]."""
    wav = client.get(f"/api/tts/result/{request_id}.wav")
    assert wav.status_code == 200, wav.text
    kept, rate = soundfile.read(io.BytesIO(wav.content), dtype="int16", always_2d=True)
    assert rate == 48_000
    return kept.T.astype(np.float32) / 32767


def test_opus_is_the_default_one_ogg_stream_of_the_exact_length(client, s16):
    response = client.post("/api/tts/stream", json=BODY)
    assert response.status_code == 200, response.text
    assert response.headers["x-sample-format"] == "opus" and response.headers["x-bit-rate"] == str(OPUS_BIT_RATE)
    frames = parse_frames(response.content)
    assert {kind for kind, _ in frames} == {0, 1}  # audio and events only
    data = b"".join(payload for kind, payload in frames if kind == 0)
    events = [payload for kind, payload in frames if kind == 1]
    assert events[-1]["type"] == "speech.done"
    assert abs(events[-1]["audio_s"] - s16.shape[1] / 48_000) < 1e-3
    assert any(e["type"] == "speech.segment" for e in events)
    assert data[:4] == b"OggS" and data.count(b"OpusHead") == 1  # one stream, one header
    assert len(data) < s16.size * 4 / 12  # ~1/20 of float32 (Ogg pages add a little)
    decoded = decode_ogg_opus(data)
    assert decoded.shape == s16.shape  # exact after pre-skip and the last page's end trim
    snr = snr_db(s16, decoded)
    print(f"opus {OPUS_BIT_RATE // 1000} kb/s vs the tiny model's clipped output: SNR {snr:.1f} dB")
    assert snr >= TINY_SNR_FLOOR_DB


@pytest.mark.parametrize("transport", ["opus", "s16"])
def test_the_download_is_the_lossless_source_whatever_the_wire(client, s16, transport):
    response = client.post("/api/tts/stream", json={**BODY, "transport": transport})
    assert response.status_code == 200
    kept = kept_wav(client, response.headers["x-request-id"])
    assert kept.shape == s16.shape
    assert np.abs(kept - s16).max() <= 1 / 32767  # the source in 16 bits, never the Opus


@pytest.mark.parametrize("value", ["mp3", "F32", "f32", "", "opus "])
def test_a_bad_transport_is_refused_naming_the_field_and_the_fix(client, value):
    response = client.post("/api/tts/stream", json={"text": "hi", "transport": value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "transport" and '"opus"' in error["message"] and '"s16"' in error["message"]
    if value.lower() == "f32":  # the way to float32's use cases
        assert "/v1/audio/speech" in error["message"] and "/api/tts/result/" in error["message"]


def test_a_transport_of_the_wrong_type_is_refused_naming_the_field(client):
    response = client.post("/api/tts/stream", json={"text": "hi", "transport": 3})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "transport"


def speech_48k(data_dir) -> np.ndarray:
    """A real speech clip (a preset's reference) as 48 kHz stereo float32 [2, n]."""
    import soxr

    wav, rate = load_audio(str(data_dir / PRESET_CLIP))
    mono = np.asarray(wav, np.float32).reshape(-1)
    mono = soxr.resample(mono, rate, 48_000).astype(np.float32)
    return np.stack([mono, 0.8 * mono])


def test_opus_on_real_speech_through_the_players_render(data_dir):
    """The route's own render (SpeechRender with the opus transport), fed the engine's 80 ms chunks
    of real speech: exact length and a transparent-range SNR; the float32 tap is the source itself."""
    pcm = speech_48k(data_dir)
    kept: list[np.ndarray] = []
    spec = OutputSpec("opus", bit_rate=OPUS_BIT_RATE)
    render = SpeechRender(spec, on_pcm=kept.append)
    chunks = [pcm[:, i:i + SAMPLES_PER_FRAME] for i in range(0, pcm.shape[1], SAMPLES_PER_FRAME)]
    timings = Timings(first_audio_s=0.0, elapsed_s=0.0, audio_s=0.0)
    data = b"".join(render.push(AudioChunk(seq=i, pcm=c, codes=np.zeros((1, 16), np.int64), is_last=False,
                                           timings=timings))[0] for i, c in enumerate(chunks))
    data += render.finish()[0]
    np.testing.assert_array_equal(np.concatenate(kept, axis=1), pcm)
    decoded = decode_ogg_opus(data)
    assert decoded.shape == pcm.shape
    snr = snr_db(pcm, decoded)
    print(f"opus {OPUS_BIT_RATE // 1000} kb/s on real speech: SNR {snr:.1f} dB, "
          f"{len(data) / (pcm.shape[1] / 48_000) / 1000:.1f} kB per audio second")
    assert snr >= SPEECH_SNR_FLOOR_DB


def test_opus_encoder_state_runs_across_chunks():
    """The stream is one encoder: cut into the engine's 80 ms chunks it gives the very bytes of the
    whole signal encoded at once (no priming or padding at a join), and decodes to the exact length."""
    t = np.arange(48_000 + 1234) / 48_000
    pcm = np.stack([0.3 * np.sin(2 * np.pi * 440 * t), 0.2 * np.sin(2 * np.pi * 660 * t)]).astype(np.float32)
    whole = StreamEncoder("opus", 48_000, 2, bit_rate=OPUS_BIT_RATE)
    at_once = whole.encode(pcm) + whole.finish()
    chunked = StreamEncoder("opus", 48_000, 2, bit_rate=OPUS_BIT_RATE)
    pieces = [chunked.encode(pcm[:, i:i + SAMPLES_PER_FRAME]) for i in range(0, pcm.shape[1], SAMPLES_PER_FRAME)]
    pieces.append(chunked.finish())
    assert sum(1 for piece in pieces[:-1] if piece) >= len(pieces) - 3  # pages leave as packets are made
    assert ogg_packets(b"".join(pieces)) == ogg_packets(at_once)  # the pages' serial numbers are random
    decoded = decode_ogg_opus(at_once)
    assert decoded.shape == pcm.shape
    assert snr_db(pcm, decoded) > 20
