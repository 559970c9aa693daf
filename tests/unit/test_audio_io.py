"""Audio I/O: sniffed decoding of the preset clips, codec input prep, output encoders, bad input."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from tts_core.audio.io import (
    AUDIO_FORMATS,
    encode_audio,
    load_audio,
    pcm_to_int16_bytes,
    sniff_container,
    to_codec_input,
    to_int16,
    wav_stream_header,
)
from tts_core.errors import InvalidRequestError

# name -> (container, sample rate, channels), from the data MANIFEST (three "*.wav" are not WAV)
PRESETS = {
    "en_2.wav": ("wav", 44100, 1),
    "en_3.wav": ("wav", 48000, 1),
    "en_4.wav": ("wav", 48000, 1),
    "en_6.wav": ("flac", 44100, 1),
    "en_8.wav": ("mp3", 44100, 2),
    "jp_2.wav": ("wav", 44100, 1),
    "zh_1.wav": ("flac", 44100, 1),
    "zh_10.wav": ("mp3", 48000, 2),
    "zh_3.wav": ("wav", 16000, 1),
    "zh_4.wav": ("wav", 16000, 1),
    "zh_6.wav": ("wav", 24000, 1),
}


def _wav_bytes(samples: np.ndarray, sample_rate: int, subtype: str = "PCM_16") -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, sample_rate, format="WAV", subtype=subtype)
    return buffer.getvalue()


def _tone(sample_rate: int, seconds: float, channels: int) -> np.ndarray:
    t = np.arange(int(sample_rate * seconds)) / sample_rate
    wave = 0.5 * np.sin(2 * np.pi * 440.0 * t)
    return np.stack([wave * (1.0 - 0.3 * c) for c in range(channels)], axis=1).astype(np.float32)  # [n, C]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_loads(data_dir: Path, name: str) -> None:
    container, rate, channels = PRESETS[name]
    path = data_dir / "presets" / name
    assert sniff_container(path.read_bytes()[:16]) == container
    wav, sample_rate = load_audio(path)
    assert (sample_rate, wav.shape[0], wav.dtype) == (rate, channels, np.float32)
    assert 2.0 < wav.shape[1] / sample_rate < 20.0 and np.abs(wav).max() <= 1.0
    same, _ = load_audio(path.read_bytes())  # bytes and path give the same samples
    assert np.array_equal(same, wav)
    codec_input = to_codec_input(wav, sample_rate)
    assert codec_input.shape == (2, round(wav.shape[1] * 48000 / sample_rate))


@pytest.mark.parametrize("rate", [16000, 24000, 44100, 48000])
@pytest.mark.parametrize("channels", [1, 2])
def test_round_trip_to_codec_input(rate: int, channels: int) -> None:
    tone = _tone(rate, 0.5, channels)
    wav, sample_rate = load_audio(_wav_bytes(tone, rate))
    assert sample_rate == rate and wav.shape == (channels, tone.shape[0])
    out = to_codec_input(wav, sample_rate)
    assert out.dtype == np.float32 and out.shape == (2, (tone.shape[0] * 48000 + rate // 2) // rate)
    if channels == 1:
        assert np.array_equal(out[0], out[1])
    if rate == 48000:
        assert np.array_equal(out, wav if channels == 2 else np.repeat(wav, 2, axis=0))
    # the 440 Hz tone survives resampling: compare against the ideal tone away from the edges
    t = np.arange(out.shape[1]) / 48000
    ideal = 0.5 * np.sin(2 * np.pi * 440.0 * t)
    middle = slice(2400, out.shape[1] - 2400)
    assert np.abs(out[0, middle] - ideal[middle]).max() < 2e-3


def test_more_than_two_channels_keep_the_first_two() -> None:
    wav = np.stack([np.full(4800, v, np.float32) for v in (0.1, 0.2, 0.3, 0.4)])
    out = to_codec_input(wav, 48000)
    assert np.array_equal(out, wav[:2])


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_encoders_decode_back(fmt: str) -> None:
    rng = np.random.default_rng(0)
    n = 48000 + 77
    pcm = (0.25 * rng.standard_normal((2, n))).astype(np.float32)
    pcm[0, :10] = [1.5, -1.5, 1.0, -1.0, 0.5, np.nan, 0, 0, 0, 0]  # clipping and NaN handling
    data = encode_audio(pcm, 48000, fmt)
    expected16 = np.round(np.clip(np.nan_to_num(pcm), -1, 1) * 32767).astype(np.int16)
    if fmt == "pcm":
        decoded = np.frombuffer(data, "<i2").reshape(n, 2).T
        assert np.array_equal(decoded, expected16)
        return
    if fmt == "float32":
        decoded = np.frombuffer(data, "<f4").reshape(n, 2).T
        assert np.array_equal(decoded, pcm, equal_nan=True)
        return
    audio, rate = sf.read(
        io.BytesIO(data), dtype="int16" if fmt in ("wav", "flac") else "float32", always_2d=True
    )
    assert rate == 48000 and audio.shape == (n, 2)
    if fmt in ("wav", "flac"):
        assert np.array_equal(audio.T, expected16)
    wav, sample_rate = load_audio(data)  # our own reader takes our own output
    assert sample_rate == 48000 and wav.shape == (2, n)


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("special", [False, True])
def test_16_bit_grid_is_the_plain_formula(channels: int, dtype, special: bool) -> None:
    """The three-pass conversion gives exactly clip, scale, round (NaN -> 0), planar and interleaved."""
    rng = np.random.default_rng(channels)
    pcm = (0.6 * rng.standard_normal((channels, 5000))).astype(dtype)
    pcm[0, :8] = [1.0, -1.0, 32766.5 / 32767, 0.5 / 32767, 1.5 / 32767, 1e30, -1e30, 1 + 1e-7]
    if special:
        pcm[-1, 10:13] = [np.nan, np.inf, -np.inf]
    expected = np.round(np.clip(np.nan_to_num(pcm.astype(np.float32)), -1, 1) * np.float32(32767)).astype(np.int16)
    assert np.array_equal(to_int16(pcm), expected)
    assert pcm_to_int16_bytes(pcm) == np.ascontiguousarray(expected.T).astype("<i2").tobytes()
    assert pcm_to_int16_bytes(pcm[:, :0]) == b""


def test_wav_stream_header() -> None:
    header = wav_stream_header(48000, 2)
    assert len(header) == 44 and header[:4] == b"RIFF" and header[36:40] == b"data"
    assert struct.unpack("<I", header[4:8])[0] == 0xFFFFFFFF == struct.unpack("<I", header[40:44])[0]
    pcm = np.linspace(-1, 1, 2 * 1000, dtype=np.float32).reshape(2, 1000)
    audio, rate = sf.read(io.BytesIO(header + pcm_to_int16_bytes(pcm)), dtype="int16", always_2d=True)
    assert rate == 48000 and audio.shape == (1000, 2)
    assert np.array_equal(audio.T, np.round(pcm * 32767).astype(np.int16))


def test_unknown_output_format_is_rejected() -> None:
    with pytest.raises(InvalidRequestError) as info:
        encode_audio(np.zeros((2, 10), np.float32), 48000, "aac")
    assert info.value.param == "response_format"


def _malformed_inputs(data_dir: Path) -> dict[str, bytes]:
    wav = _wav_bytes(_tone(16000, 0.5, 1), 16000)
    flac = (data_dir / "presets" / "zh_1.wav").read_bytes()
    mp3 = (data_dir / "presets" / "en_8.wav").read_bytes()
    rng = np.random.default_rng(1)
    nine_channels = _wav_bytes(np.zeros((4800, 9), np.float32), 48000)
    nan_wav = _wav_bytes(np.full((4800, 1), np.nan, np.float32), 48000, subtype="FLOAT")
    return {
        "empty": b"",
        "wav header only": wav[:40],
        "wav cut inside header": wav[:20],
        "flac truncated": flac[:200],
        "mp3 truncated": mp3[:200],
        "wrong magic": b"RIFX" + wav[4:],
        "text": b"hello, this is not audio" * 10,
        "random bytes": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "8 kHz one sample": _wav_bytes(np.zeros((1, 1), np.float32), 8000),
        "zero length": _wav_bytes(np.zeros((0, 1), np.float32), 16000),
        "nine channels": nine_channels,
        "nan samples": nan_wav,
    }


def test_malformed_inputs_raise_invalid_request(data_dir: Path) -> None:
    for label, data in _malformed_inputs(data_dir).items():
        with pytest.raises(InvalidRequestError) as info:
            load_audio(data)
        assert info.value.param == "ref_audio", label
    with pytest.raises(InvalidRequestError):
        load_audio(data_dir / "presets" / "no-such-file.wav")
    with pytest.raises(InvalidRequestError):
        load_audio(12345)  # type: ignore[arg-type]
    ok, rate = load_audio(_wav_bytes(_tone(8000, 0.5, 1), 8000))  # 8 kHz itself is fine
    assert rate == 8000 and ok.shape == (1, 4000)


def test_to_codec_input_rejects_bad_arrays() -> None:
    for wav, rate in [
        (np.zeros((2, 0), np.float32), 48000),
        (np.zeros((2, 10, 3), np.float32), 48000),
        (np.full((1, 100), np.nan, np.float32), 48000),
        (np.zeros((1, 100), np.float32), 0),
        (np.zeros((1, 100), np.int16), 48000),
    ]:
        with pytest.raises(InvalidRequestError):
            to_codec_input(wav, rate)


@settings(max_examples=40, deadline=None)
@given(
    prefix=st.sampled_from([b"", b"RIFF\x00\x00\x00\x00WAVE", b"fLaC", b"OggS", b"ID3\x03\x00", b"\xff\xfb"]),
    body=st.binary(max_size=2048),
)
def test_arbitrary_bytes_never_raise_anything_else(prefix: bytes, body: bytes) -> None:
    try:
        wav, rate = load_audio(prefix + body)
    except InvalidRequestError:
        return
    assert wav.dtype == np.float32 and wav.ndim == 2 and rate > 0 and np.isfinite(wav).all()
