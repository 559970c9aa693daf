"""`POST /v1/audio/voices` reports the clip doctor's `analysis` and refuses nothing merely imperfect.

The real app (tiny checkpoints, CPU) over a real socket, driven by the official `openai` SDK and by
raw multipart: a clean preset is "good"; the same clip with noise, tones or clipping is saved all
the same, with the verdict naming the problem; `window=auto` saves the doctor's window and
`window=start,end` the user's; a bad window is a 400 naming the field.
"""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from support.server_helpers import ServerThread, tiny_synthesizer_factory

from tts_core.audio.io import load_audio


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from studio.app import create_app
    from studio.service import SynthesizerService
    from studio.settings import ServerSettings

    cache = tmp_path_factory.mktemp("clip_doctor_cache")
    service = SynthesizerService(tiny_synthesizer_factory(data_dir, cache))
    service.start(background=False)
    assert service.wait(0), f"tiny model failed to load: {service.error}"
    try:
        with ServerThread(create_app(service, ServerSettings())) as running:
            yield running.url
    finally:
        service.close()


def _wav_bytes(wav: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    sf.write(out, wav.T, rate, format="WAV", subtype="FLOAT")
    return out.getvalue()


def _post(url: str, clip: bytes, **form) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/voices", data={"name": "Doctor", **form},
                      files={"audio_sample": ("clip.wav", clip, "audio/wav")}, timeout=120)


def test_a_clean_preset_is_good_through_the_official_sdk(server: str, data_dir: Path) -> None:
    clip = (data_dir / "presets" / "en_2.wav").read_bytes()
    sdk = openai.OpenAI(base_url=f"{server}/v1", api_key="x", max_retries=0, timeout=120)
    made = sdk.audio.voices.create(name="Clean", audio_sample=("en_2.wav", clip, "audio/wav"),
                                   consent="cons_local")
    analysis = made.model_extra["analysis"]
    assert analysis["verdict"] == "good"
    start, end = analysis["window"]
    assert 0 <= start < end <= 7.9 and 3.0 <= end - start <= 10.0
    assert analysis["speech_seconds"] > 5 and analysis["snr_db"] > 30 and analysis["clipped_fraction"] == 0
    listed = httpx.get(f"{server}/v1/audio/voices/{made.id}", timeout=30).json()
    assert listed["analysis"] is None  # reported when saved, not stored
    assert httpx.get(f"{server}/v1/audio/voices/{made.id}/sample", timeout=30).content == clip  # whole clip kept


@pytest.mark.parametrize("damage, named", [("noise", "noisy"), ("tones", "music or steady noise"),
                                           ("clipping", "clipped")])
def test_imperfect_clips_are_saved_with_the_problem_named(server: str, data_dir: Path, damage: str,
                                                          named: str) -> None:
    wav, rate = load_audio(data_dir / "presets" / "en_6.wav")
    rms = float(np.sqrt(np.mean(np.square(wav))))
    if damage == "noise":
        wav = wav + np.random.default_rng(3).normal(0, rms / 3.2, wav.shape).astype(np.float32)
    elif damage == "tones":
        t = np.arange(wav.shape[1]) / rate
        wav = wav + (2 * rms * sum(np.sin(2 * np.pi * f * t) for f in (220.0, 261.6, 329.6)) / 3).astype(np.float32)
    else:
        wav = np.clip(wav * 8, -1, 1)
    resp = _post(server, _wav_bytes(wav, rate))
    assert resp.status_code == 200, resp.text
    assert named in resp.json()["analysis"]["verdict"]


def test_the_window_is_what_gets_saved(server: str, data_dir: Path) -> None:
    wav, rate = load_audio(data_dir / "presets" / "zh_3.wav")
    silence = np.zeros((1, 5 * rate), np.float32)
    clip = _wav_bytes(np.concatenate([silence, wav, silence], axis=1), rate)
    auto = _post(server, clip, window="auto")
    assert auto.status_code == 200, auto.text
    body = auto.json()
    start, end = body["analysis"]["window"]
    assert start >= 4.9 and end <= 5.0 + wav.shape[1] / rate + 0.2
    assert body["sample_seconds"] == pytest.approx(end - start, abs=0.1)
    assert "mostly silence" in body["analysis"]["verdict"]
    saved, saved_rate = sf.read(io.BytesIO(httpx.get(f"{server}{body['sample_url']}", timeout=30).content))
    assert saved_rate == rate and len(saved) == pytest.approx((end - start) * rate, abs=2)

    mine = _post(server, clip, window="6,9.5")
    assert mine.status_code == 200 and mine.json()["sample_seconds"] == pytest.approx(3.5, abs=0.1)

    for bad in ("later", "9,6", "40,45", "1,nan"):
        refused = _post(server, clip, window=bad)
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"]["param"] == "window"
