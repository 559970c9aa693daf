"""`tts_core.audio.encoders`: the output profile (rate, channels) and progressive encoders, decoded by PyAV
as their bytes arrive."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
from support.stream_decoding import decode_progressively

from tts_core.audio.encoders import STREAM_FORMATS, ProfileConverter, StreamEncoder, check_rate

SR = 48_000
PIECE = 3840  # one codec frame


def _voice_like(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    left = 0.3 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    right = 0.3 * np.sin(2 * np.pi * 330 * t)
    return np.stack([left, right]).astype(np.float32)


def _encode_in_pieces(fmt: str, pcm: np.ndarray, rate: int = SR, channels: int = 2) -> list[bytes]:
    profile, encoder = ProfileConverter(rate, channels), StreamEncoder(fmt, rate, channels)
    pieces = [encoder.encode(profile.push(pcm[:, at : at + PIECE])) for at in range(0, pcm.shape[1], PIECE)]
    pieces += [encoder.encode(profile.flush()), encoder.finish()]
    return pieces


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
@pytest.mark.parametrize(("rate", "channels"), [(48_000, 2), (24_000, 1)])
def test_compressed_streams_decode_progressively(fmt: str, rate: int, channels: int) -> None:
    pcm = _voice_like(5.0)  # FFmpeg's FLAC parser checks ~10 frame headers (~1 s) before its first frame
    pieces = _encode_in_pieces(fmt, pcm, rate, channels)
    total = sum(map(len, pieces))
    first_bytes = next(i for i, piece in enumerate(pieces) if piece)
    assert first_bytes <= 2, f"{fmt}: nothing came out before codec frame {first_bytes}"  # not held to the end
    decoded = decode_progressively(fmt, pieces)
    assert decoded.first_audio_after is not None and decoded.first_audio_after < total / 2, (
        f"{fmt}: first audio decoded only after {decoded.first_audio_after} of {total} bytes")
    assert decoded.channels == channels
    expected_rate = SR if fmt == "opus" else rate  # Opus always decodes at 48 kHz
    assert decoded.rate == expected_rate
    # Encoder delay and padding (mp3, aac) add at most a few codec frames; nothing is lost.
    seconds = decoded.samples / decoded.rate
    assert 5.0 - 1e-3 <= seconds <= 5.0 + 0.1, seconds


def test_lossy_stream_sounds_like_the_input() -> None:
    pcm = _voice_like(1.0)
    decoded = decode_progressively("opus", _encode_in_pieces("opus", pcm)).pcm
    # Opus's pre-skip is honoured by the decoder: the audio lines up with the input.
    n = min(decoded.shape[1], pcm.shape[1])
    error = decoded[:, 2000:n] - pcm[:, 2000:n]
    assert np.sqrt(np.mean(error**2)) < 0.1 * np.sqrt(np.mean(pcm**2))


@pytest.mark.parametrize(("rate", "channels"), [(48_000, 2), (24_000, 1), (16_000, 2)])
def test_pcm_and_wav_streams_are_exact(rate: int, channels: int) -> None:
    pcm = _voice_like(0.5)
    raw = b"".join(_encode_in_pieces("pcm", pcm, rate, channels))
    wav = b"".join(_encode_in_pieces("wav", pcm, rate, channels))
    assert wav[:4] == b"RIFF" and wav[4:8] == b"\xff\xff\xff\xff" and wav[44:] == raw
    audio, sr = sf.read(io.BytesIO(wav), dtype="int16", always_2d=True)
    assert sr == rate and audio.shape == (round(0.5 * rate), channels)
    np.testing.assert_array_equal(audio.reshape(-1), np.frombuffer(raw, "<i2"))


def test_profile_converter_is_chunking_invariant_and_mono_is_the_mean() -> None:
    pcm = _voice_like(0.7)
    whole = ProfileConverter(24_000, 1)
    expected = np.concatenate([whole.push(pcm), whole.flush()], axis=1)
    rng = np.random.default_rng(0)
    pieced, parts, at = ProfileConverter(24_000, 1), [], 0
    while at < pcm.shape[1]:
        size = int(rng.integers(1, 5000))
        parts.append(pieced.push(pcm[:, at : at + size]))
        at += size
    parts.append(pieced.flush())
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), expected)
    assert expected.shape == (1, round(0.7 * 24_000))
    same_rate = ProfileConverter(SR, 1).push(pcm)
    np.testing.assert_allclose(same_rate[0], pcm.mean(axis=0), atol=1e-7)
    identity = ProfileConverter(SR, 2)
    assert identity.push(pcm) is pcm


def test_float32_stream() -> None:
    pcm = _voice_like(0.1)
    data = b"".join(_encode_in_pieces("float32", pcm))
    np.testing.assert_array_equal(np.frombuffer(data, "<f4").reshape(-1, 2).T, pcm)


def test_aac_stream_and_rates() -> None:
    data = b"".join(_encode_in_pieces("aac", _voice_like(0.5)))
    assert data[:2] == b"\xff\xf1" or data[:2] == b"\xff\xf9"  # ADTS sync word
    assert check_rate("opus", 22_050) and check_rate("mp3", 11_025) and check_rate("wav", 24_000) is None
    with pytest.raises(ValueError):
        StreamEncoder("opus", 44_100, 2)
    with pytest.raises(ValueError):
        StreamEncoder("ogg", SR, 2)
    assert set(STREAM_FORMATS) >= {"mp3", "opus", "aac", "flac", "wav", "pcm"}


def test_an_empty_stream_is_still_a_valid_file() -> None:
    for fmt in ("wav", "mp3", "aac"):
        encoder = StreamEncoder(fmt, SR, 2)
        data = encoder.finish()
        assert fmt != "wav" or len(data) == 44


def test_close_without_finish_releases_the_encoder() -> None:
    encoder = StreamEncoder("mp3", SR, 2)
    encoder.encode(_voice_like(0.2))
    encoder.close()
    encoder.close()  # twice is harmless
