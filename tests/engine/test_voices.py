"""VoiceBank: presets through the real tiny codec, availability, concurrency, names, uploads."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from support.voice_helpers import CountingEncoder, forbid_encoding, make_bank, wav_bytes

from tts_core.errors import (
    InvalidRequestError,
    PayloadTooLargeError,
    VoiceNotFoundError,
    VoiceUnavailableError,
)
from tts_core.loader import reference_encoder
from tts_core.model.codec_loading import load_codec
from tts_core.types import NUM_CODEBOOKS, SAMPLE_RATE_HZ, Voice


# ------------------------------- presets with the real tiny codec -------------------------------
@pytest.fixture(scope="module")
def tiny_encoder(data_dir: Path):
    return reference_encoder(load_codec(data_dir / "parity" / "tiny_codec"), torch.device("cpu"))


def test_presets_resolve_from_local_clips_with_tiny_codec(tmp_path: Path, data_dir: Path,
                                                         tiny_encoder) -> None:
    calls = []

    def encoder(wav: np.ndarray) -> np.ndarray:
        calls.append(wav.shape)
        return tiny_encoder(wav)

    bank = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=encoder)
    for name, frames in (("Cedar", 98), ("willow", 59), ("Hoshi", 32)):  # names are case-insensitive
        resolved = bank.resolve(Voice.preset(name))
        assert resolved.codes.dtype == np.int64 and resolved.codes.shape == (frames, NUM_CODEBOOKS)
        assert resolved.codes.min() >= 0 and resolved.codes.max() < 1024
        assert not resolved.codes.flags.writeable
        assert resolved.notice is None
    assert [shape[0] for shape in calls] == [2, 2, 2]
    assert bank.resolve(None).name == bank.default_voice == "Cedar"
    assert bank.resolve(None).transcript  # the default clip's transcript is known
    assert len(calls) == 3  # in-memory hit

    # A fresh bank over the same cache directory loads the codes from disk without encoding.
    again = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=forbid_encoding)
    np.testing.assert_array_equal(again.resolve(Voice.preset("Cedar")).codes, bank.resolve(None).codes)
    cached = list((tmp_path / "cache" / "test-codec").glob("*.npy"))
    assert sorted(p.stem for p in cached) == sorted(
        bank.catalog.get(n).clip.sha256 for n in ("Cedar", "Willow", "Hoshi")
    )
    # Another codec fingerprint never reuses these codes.
    other = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=None, codec_fingerprint="other")
    with pytest.raises(VoiceUnavailableError, match="encoder"):
        other.resolve(Voice.preset("Cedar"))


# Prompt frame counts of the official ONNX manifest's built-ins (3rd-party reading of revision
# f52645cb): our decode + resample of the same clips must give the same number of 80 ms frames.
OFFICIAL_FRAMES = {"Cedar": 98, "Hutong": 98, "Lecturer": 140, "Boba": 102, "Moonlight": 218, "Quill": 98,
                   "Willow": 59, "Anchor": 59, "Atlas": 168, "Hoshi": 32}


def test_every_clip_decodes_to_the_official_frame_count(tmp_path: Path, data_dir: Path) -> None:
    bank = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=CountingEncoder())
    clip_presets = [p.name for p in bank.catalog.presets if p.clip is not None]
    frames = {name: bank.resolve(Voice.preset(name)).codes.shape[0] for name in clip_presets}
    assert {name: frames[name] for name in OFFICIAL_FRAMES} == OFFICIAL_FRAMES
    assert frames["Nova"] == 97


def test_list_presets_reports_availability_without_encoding(tmp_path: Path, data_dir: Path) -> None:
    bank = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=forbid_encoding)
    infos = {p.name: p for p in bank.list_presets()}
    assert len(infos) == len(bank.catalog.presets)
    assert infos["Cedar"].available and infos["Cedar"].has_clip and infos["Cedar"].unavailable_reason is None
    # Why six presets fail even with the voices folder: their only source is the ONNX release's
    # browser_poc_manifest.json (their clips are not licensed for redistribution, so the shared data
    # has none), and it is not in the folder. Each says so, in words for people.
    manifest_only = [p for p in bank.catalog.presets if p.clip is None]
    assert sorted(p.name for p in manifest_only) == ["Hana", "Kaze", "Kumo", "Nami", "Sora", "Tsuki"]
    for preset in manifest_only:
        info = infos[preset.name]
        assert not info.available and not info.has_clip
        assert info.unavailable_reason == ("needs the ONNX release's browser_poc_manifest.json, which is not in "
                                           "the voices folder, and downloads are off")
    assert all(infos[p.name].available for p in bank.catalog.presets if p.clip is not None)
    assert bank.clip_path("cedar") == data_dir / "presets" / "zh_1.wav"
    assert bank.clip_path(manifest_only[0].name) is None


def test_one_preset_is_its_list_entry_by_any_case(tmp_path: Path, data_dir: Path) -> None:
    """`preset_info` (what a request resolves) is the preset's `list_presets` entry, found by name in
    any case; unknown or path-like names are None."""
    bank = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=forbid_encoding)
    listed = {p.name: p for p in bank.list_presets()}
    for name, info in listed.items():
        assert bank.preset_info(name) == info
        assert bank.preset_info(f" {name.upper()} ") == info
    for name in ("", "nobody", "../presets/zh_1", "zh_1.wav"):
        assert bank.preset_info(name) is None


def test_encoding_happens_once_under_concurrency(tmp_path: Path, data_dir: Path) -> None:
    encoder = CountingEncoder()
    bank = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=encoder)
    results, errors = [], []

    def work() -> None:
        try:
            results.append(bank.resolve(Voice.preset("Anchor")).codes)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 8
    assert len(encoder.calls) == 1
    assert all(r is results[0] for r in results)


# ------------------------------- names, paths, codes ---------------------------------------------
@pytest.mark.parametrize("name", ["../../etc/passwd", "zh_1.wav", "..", "Cedar/../Willow", "C:\\x", "Junhao"])
def test_unknown_and_path_like_names_are_not_found(tmp_path: Path, data_dir: Path, name: str) -> None:
    bank = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=forbid_encoding)
    with pytest.raises(VoiceNotFoundError) as info:
        bank.resolve(Voice.preset(name))
    assert "Cedar" in info.value.message  # lists valid names
    with pytest.raises(VoiceNotFoundError):
        bank.clip_path(name)


def test_codes_pass_through(tmp_path: Path) -> None:
    codes = np.ones((5, NUM_CODEBOOKS), dtype=np.int32)
    resolved = make_bank(tmp_path, encoder=forbid_encoding).resolve(Voice.from_codes(codes, transcript="hi"))
    assert resolved.codes.dtype == np.int64 and resolved.codes.shape == (5, NUM_CODEBOOKS)
    assert resolved.transcript == "hi" and resolved.notice is None


# ------------------------------- uploads ---------------------------------------------------------
def test_upload_is_trimmed_with_notice_and_cached(tmp_path: Path) -> None:
    encoder = CountingEncoder()
    bank = make_bank(tmp_path, encoder=encoder, max_clip_s=6.0)
    data = wav_bytes(9.5)
    first = bank.resolve(Voice.from_audio(data, transcript="some words"))
    assert encoder.calls == [6 * SAMPLE_RATE_HZ]
    assert first.codes.shape == (75, NUM_CODEBOOKS)
    assert "first 6 s" in first.notice and "3-10 s" in first.notice and "ref_text" in first.notice
    second = bank.resolve(Voice.from_audio(data))
    assert len(encoder.calls) == 1 and second.codes is first.codes  # memory LRU
    assert "ref_text" not in second.notice
    # Disk cache: a new bank over the same directory does not encode again.
    again = make_bank(tmp_path, encoder=forbid_encoding, max_clip_s=6.0)
    np.testing.assert_array_equal(again.resolve(Voice.from_audio(data)).codes, first.codes)


def test_upload_from_path_and_short_clip_has_no_notice(tmp_path: Path) -> None:
    path = tmp_path / "clip.flac"
    path.write_bytes(wav_bytes(1.0))  # WAV bytes under a .flac name: content decides
    resolved = make_bank(tmp_path, encoder=CountingEncoder()).resolve(Voice.from_audio(str(path)))
    assert resolved.notice is None and resolved.codes.shape == (12, NUM_CODEBOOKS)


def test_upload_shorter_than_one_frame_is_rejected(tmp_path: Path) -> None:
    def short_loader(data: bytes):
        return np.full((1, 2000), 0.1, dtype=np.float32), SAMPLE_RATE_HZ

    bank = make_bank(tmp_path, encoder=forbid_encoding, load_audio=short_loader)
    with pytest.raises(InvalidRequestError, match="80 ms") as info:
        bank.resolve(Voice.from_audio(b"anything"))
    assert info.value.param == "ref_audio"


def test_upload_errors(tmp_path: Path) -> None:
    bank = make_bank(tmp_path, encoder=forbid_encoding, max_upload_bytes=10_000)
    with pytest.raises(PayloadTooLargeError, match="limit") as info:
        bank.resolve(Voice.from_audio(wav_bytes(1.0)))
    assert info.value.param == "ref_audio"
    with pytest.raises(InvalidRequestError, match="silent"):
        make_bank(tmp_path, encoder=forbid_encoding).resolve(Voice.from_audio(wav_bytes(1.0, amplitude=0.0)))
    with pytest.raises(InvalidRequestError) as info:
        make_bank(tmp_path, encoder=forbid_encoding).resolve(Voice.from_audio(b"definitely not audio"))
    assert info.value.param == "ref_audio"
    with pytest.raises(VoiceUnavailableError, match="encoder"):
        make_bank(tmp_path, encoder=None).resolve(Voice.from_audio(wav_bytes(1.0)))


def test_real_clip_upload_with_tiny_codec(tmp_path: Path, data_dir: Path, tiny_encoder) -> None:
    """An MP3 named .wav (zh_10) goes through the real loader and codec; longer than max_clip_s."""
    bank = make_bank(tmp_path, encoder=tiny_encoder, max_clip_s=5.0)
    resolved = bank.resolve(Voice.from_audio((data_dir / "presets" / "zh_10.wav").read_bytes()))
    assert resolved.codes.shape == (62, NUM_CODEBOOKS)  # floor(5 s / 80 ms)
    assert "11.2 s" in resolved.notice
