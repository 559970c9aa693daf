"""The ZeroGPU page relay with the player's Opus transport (the app's choice: every relayed byte
passes through Gradio's queue): one Ogg/Opus stream per item, base64 in the pcm messages, decoding
(PyAV) to exactly the samples the engine made."""

from __future__ import annotations

import base64
import io
import json

import av
import numpy as np
import pytest
from test_zerogpu_engine import REQUEST, _Mode, _pcm, tiny  # noqa: F401  (tiny: the module's fixture)

from studio.api.requests import UploadStore
from studio.delivery.transports import OPUS_BIT_RATE
from studio.service import SynthesizerService
from studio.settings import ServerSettings
from studio.zerogpu.relay import PageRelay
from tts_core import SynthesisRequest


def test_page_relay_carries_one_opus_stream_per_item(tiny):  # noqa: F811
    synth, stream = tiny
    service = SynthesizerService(lambda report: synth)
    service.start(background=False)
    relay = PageRelay(_Mode(stream), service, ServerSettings(), UploadStore(max_total_bytes=1 << 20),
                      transport="opus")
    payload = {"items": [{"label": "A", "request": {**REQUEST, "voice": None}}]}
    messages = [json.loads(m) for m in relay.relay(json.dumps(payload))]
    assert [m["n"] for m in messages] == list(range(len(messages)))
    assert messages[0]["type"] == "start" and messages[0]["format"] == "opus"
    assert messages[0]["bitRate"] == OPUS_BIT_RATE and messages[-1]["type"] == "end"
    audio = [m for m in messages if m["type"] == "pcm"]
    assert audio and all("opus" in m and "pcm" not in m for m in audio)
    data = b"".join(base64.b64decode(m["opus"]) for m in audio)
    assert data.count(b"OpusHead") == 1  # one stream for the item, not one per chunk
    with av.open(io.BytesIO(data), format="ogg") as container:
        decoded = np.concatenate([f.to_ndarray() for f in container.decode(audio=0)], axis=1)
    expected = _pcm(synth.stream(SynthesisRequest(**REQUEST)))
    assert decoded.shape == expected.shape  # exact after pre-skip and the end trim
    clipped = np.clip(expected, -1, 1)  # the tiny model's noise peaks far over full scale
    snr = 10 * np.log10((clipped**2).sum() / ((clipped - decoded) ** 2).sum())
    assert snr > 3.0, snr  # the same signal, aligned (see test_stream_transports.TINY_SNR_FLOOR_DB)
    assert len(data) < expected.size * 4 / 12  # far fewer bytes than float32 (before base64)


def test_page_relay_refuses_an_unknown_transport(tiny):  # noqa: F811
    synth, stream = tiny
    with pytest.raises(ValueError, match="'f32' or 'opus'"):
        PageRelay(_Mode(stream), SynthesizerService(lambda report: synth), ServerSettings(), UploadStore(),
                  transport="mp3")
