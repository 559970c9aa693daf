"""Voice catalog and VoiceBank: catalog rules, preset resolution, caching, offline behaviour, uploads."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tts_core.errors import (
    InvalidRequestError,
    PayloadTooLargeError,
    VoiceNotFoundError,
    VoiceUnavailableError,
)
from tts_core.types import NUM_CODEBOOKS, SAMPLE_RATE_HZ, Voice
from tts_core.voices import CATALOG_PATH, VoiceBank, load_catalog, parse_catalog

PINNED_COMMIT = "42b46456f414b66e7e1df72bd88180322e243b40"
# Public figures the upstream assets imitate, and upstream built-in names (real or franchise names).
BANNED_NAMES = ("trump", "taylor", "swift", "杨幂", "yang mi", "xiaoyu", "junhao", "zhiming", "weiguo",
                "yuewen", "lingyu", "ava", "bella", "adam", "nathan", "soyo", "saki", "mortis", "umiri",
                "mei", "anon", "arisa", "togawa", "sakura", "yui", "aoi", "hina")
BANNED_SOURCES = {"en_1.wav", "en_7.wav", "zh_11.wav", "zh_2.wav", "zh_5.wav"}
BANNED_MANIFEST_VOICES = {"Trump", "Xiaoyu"}


def raw_catalog() -> dict:
    return json.loads(CATALOG_PATH.read_text(encoding="utf-8"))


class CountingEncoder:
    """Deterministic stand-in codec: one frame per 3840 samples, codes from the signal's energy."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, wav: np.ndarray) -> np.ndarray:
        assert wav.dtype == np.float32 and wav.shape[0] == 2
        with self._lock:
            self.calls.append(wav.shape[1])
        frames = wav.shape[1] // 3840
        energy = np.abs(wav[:, : frames * 3840]).reshape(2, frames, 3840).mean(axis=(0, 2))
        return (np.arange(NUM_CODEBOOKS)[None] + (energy[:, None] * 5000).astype(np.int64)) % 1024


def forbid_encoding(wav: np.ndarray) -> np.ndarray:
    raise AssertionError("this bank must not encode anything")


def wav_bytes(seconds: float, sample_rate: int = 24_000, amplitude: float = 0.3) -> bytes:
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    signal = amplitude * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    buffer = io.BytesIO()
    sf.write(buffer, signal.astype(np.float32), sample_rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def make_bank(tmp_path: Path, *, catalog=None, voices_dir=None, encoder=None, **kwargs) -> VoiceBank:
    return VoiceBank(catalog or load_catalog(), voices_dir=voices_dir, cache_dir=tmp_path / "cache",
                     encoder=encoder, codec_fingerprint=kwargs.pop("codec_fingerprint", "test-codec"),
                     allow_download=kwargs.pop("allow_download", False), **kwargs)


# ------------------------------- catalog --------------------------------------------------------
def test_catalog_is_valid_and_broad() -> None:
    catalog = load_catalog()
    assert len(catalog.presets) >= 15
    assert {p.language for p in catalog.presets} == {"zh", "en", "ja"}
    assert {p.gender for p in catalog.presets} == {"female", "male"}
    names = [p.name.casefold() for p in catalog.presets]
    assert len(names) == len(set(names))
    default = catalog.find(catalog.default)
    assert default is not None and default.language in ("zh", "en") and default.clip is not None


def test_catalog_has_no_public_figures_or_upstream_character_names() -> None:
    catalog = load_catalog()
    for preset in catalog.presets:
        text = f"{preset.name} {preset.description}".casefold()
        for banned in BANNED_NAMES:
            assert not re.search(rf"\b{re.escape(banned)}\b", text), (preset.name, banned)
        for source in preset.sources:
            assert source.file not in BANNED_SOURCES, preset.name
            assert source.voice not in BANNED_MANIFEST_VOICES, preset.name


def test_clip_sources_are_pinned_and_match_the_data_manifest(data_dir: Path) -> None:
    manifest_md = (data_dir / "MANIFEST.md").read_text()
    clips = [p.clip for p in load_catalog().presets if p.clip is not None]
    assert len(clips) >= 11
    for clip in clips:
        assert re.fullmatch(r"[0-9a-f]{64}", clip.sha256)
        assert clip.url == (f"https://raw.githubusercontent.com/OpenMOSS/MOSS-TTS-Nano/{PINNED_COMMIT}"
                            f"/assets/audio/{clip.file}")
        assert f"| presets/{clip.file} | " in manifest_md and clip.sha256 in manifest_md, clip.file


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c["presets"][1].update(name=c["presets"][0]["name"].upper()), "unique"),
        (lambda c: c["presets"][0]["sources"][1].update(file="../../etc/passwd"), "plain file name"),
        (lambda c: c["presets"][0]["sources"][1].update(file="sub/zh_1.wav"), "plain file name"),
        (lambda c: c["presets"][0]["sources"][1].update(sha256="ABC"), "sha256"),
        (lambda c: c["presets"][0]["sources"][1].update(url="http://example.com/zh_1.wav"), "https"),
        (lambda c: c["presets"][0]["sources"].append({"type": "magic"}), "unknown source type"),
        (lambda c: c["presets"][0].update(language="fr"), "language"),
        (lambda c: c["presets"][0].update(description="two\nlines"), "one non-empty line"),
        (lambda c: c.update(default="Nobody"), "default voice"),
    ],
)
def test_parse_catalog_rejects_bad_entries(mutate, message: str) -> None:
    data = copy.deepcopy(raw_catalog())
    mutate(data)
    with pytest.raises(ValueError, match=message):
        parse_catalog(data)


# ------------------------------- presets with the real tiny codec -------------------------------
@pytest.fixture(scope="module")
def tiny_encoder(data_dir: Path):
    from tts_core.model.codec_loading import load_codec
    from tts_core.voices import encoder_from_codec

    return encoder_from_codec(load_codec(data_dir / "parity" / "tiny_codec"))


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
    # Manifest-only presets need browser_poc_manifest.json, which is not shipped with the data.
    manifest_only = [p for p in bank.catalog.presets if p.clip is None]
    assert manifest_only
    for preset in manifest_only:
        info = infos[preset.name]
        assert not info.available and not info.has_clip
        assert "MOSS_TTS_VOICES_DIR" in info.unavailable_reason
    assert bank.clip_path("cedar") == data_dir / "presets" / "zh_1.wav"
    assert bank.clip_path(manifest_only[0].name) is None


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


# ------------------------------- offline, mismatches, downloads, manifest ----------------------
def small_catalog(data_dir: Path, *, manifest_sha: str | None = None, manifest_size: int | None = None):
    data = raw_catalog()
    keep = {"Cedar", "Willow", "Sora"}
    data["presets"] = [p for p in data["presets"] if p["name"] in keep]
    ghost = copy.deepcopy(data["presets"][0])
    ghost.update(name="Ghost", description="A preset whose clip is nowhere to be found.")
    ghost["sources"] = [{"type": "clip", "file": "missing.wav", "sha256": "0" * 64,
                         "url": "https://example.invalid/missing.wav"}]
    data["presets"].append(ghost)
    if manifest_sha:
        data["manifest"].update(sha256=manifest_sha, size=manifest_size)
    return parse_catalog(data)


def test_offline_unavailable_preset_is_reported_and_others_work(tmp_path: Path, data_dir: Path) -> None:
    bank = make_bank(tmp_path, catalog=small_catalog(data_dir), voices_dir=data_dir / "presets",
                     encoder=CountingEncoder())
    infos = {p.name: p for p in bank.list_presets()}
    assert not infos["Ghost"].available
    assert "missing.wav" in infos["Ghost"].unavailable_reason
    assert "MOSS_TTS_VOICES_DIR" in infos["Ghost"].unavailable_reason
    with pytest.raises(VoiceUnavailableError) as info:
        bank.resolve(Voice.preset("ghost"))
    assert "offline" in info.value.message and info.value.param == "voice"
    assert bank.resolve(Voice.preset("Willow")).codes.shape[1] == NUM_CODEBOOKS
    with pytest.raises(VoiceUnavailableError, match="manifest"):
        bank.resolve(Voice.preset("Sora"))


def test_no_voices_dir_at_all(tmp_path: Path, data_dir: Path) -> None:
    bank = make_bank(tmp_path, voices_dir=None, encoder=CountingEncoder())
    assert not any(p.available for p in bank.list_presets())
    with pytest.raises(VoiceUnavailableError, match="no voices folder"):
        bank.resolve(None)


def test_sha256_mismatch_is_reported_not_used(tmp_path: Path) -> None:
    voices = tmp_path / "voices"
    voices.mkdir()
    (voices / "zh_1.wav").write_bytes(wav_bytes(2.0))  # right name, wrong content
    bank = make_bank(tmp_path, voices_dir=voices, encoder=CountingEncoder())
    info = {p.name: p for p in bank.list_presets()}["Cedar"]
    assert not info.available and not info.has_clip
    assert "sha256" in info.unavailable_reason
    with pytest.raises(VoiceUnavailableError, match="sha256"):
        bank.resolve(Voice.preset("Cedar"))
    assert bank.clip_path("Cedar") is None


def test_download_is_verified_and_kept(tmp_path: Path, data_dir: Path) -> None:
    catalog = load_catalog()
    clip = catalog.get("Willow").clip
    body = (data_dir / "presets" / clip.file).read_bytes()
    requested = []

    def fetch(url: str, max_bytes: int, timeout_s: float) -> bytes:
        requested.append(url)
        assert max_bytes >= len(body) and timeout_s > 0
        return body if url == clip.url else b"not what was pinned"

    bank = make_bank(tmp_path, voices_dir=None, encoder=CountingEncoder(), allow_download=True, fetch=fetch)
    assert all(p.available for p in bank.list_presets())  # downloadable on first use
    assert bank.resolve(Voice.preset("Willow")).codes.shape == (59, NUM_CODEBOOKS)
    assert requested[-1] == clip.url
    kept = bank.clip_path("Willow")
    assert kept is not None and kept.parent == tmp_path / "cache" / "downloads"
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == clip.sha256
    with pytest.raises(VoiceUnavailableError, match="sha256 mismatch"):
        bank.resolve(Voice.preset("Anchor"))  # manifest and clip both come back wrong


def test_manifest_codes_are_used_first(tmp_path: Path, data_dir: Path) -> None:
    codes = np.arange(40 * NUM_CODEBOOKS).reshape(40, NUM_CODEBOOKS) % 1024
    manifest = json.dumps({"builtin_voices": [
        {"voice": "Junhao", "prompt_audio_codes": codes.tolist()},
        {"voice": "Soyo", "prompt_audio_codes": codes[:7].tolist()},
        {"voice": "Broken", "prompt_audio_codes": [[1, 2, 3]]},
    ]}).encode()
    voices = tmp_path / "voices"
    voices.mkdir()
    (voices / "browser_poc_manifest.json").write_bytes(manifest)
    catalog = small_catalog(data_dir, manifest_sha=hashlib.sha256(manifest).hexdigest(),
                            manifest_size=len(manifest))
    bank = make_bank(tmp_path, catalog=catalog, voices_dir=voices, encoder=forbid_encoding)
    infos = {p.name: p for p in bank.list_presets()}
    assert infos["Cedar"].available and infos["Sora"].available and not infos["Willow"].available
    np.testing.assert_array_equal(bank.resolve(Voice.preset("Cedar")).codes, codes)
    assert bank.resolve(Voice.preset("Sora")).codes.shape == (7, NUM_CODEBOOKS)
    # A manifest whose bytes do not match the pinned sha256 is ignored.
    (voices / "browser_poc_manifest.json").write_bytes(manifest.replace(b"Soyo", b"Soya"))
    fresh = make_bank(tmp_path, catalog=catalog, voices_dir=voices, encoder=forbid_encoding)
    assert not {p.name: p for p in fresh.list_presets()}["Sora"].available


# ------------------------------- names, paths, codes ---------------------------------------------
@pytest.mark.parametrize("name", ["../../etc/passwd", "zh_1.wav", "..", "Cedar/../Willow", "C:\\x", "Junhao"])
def test_unknown_and_path_like_names_are_not_found(tmp_path: Path, data_dir: Path, name: str) -> None:
    bank = make_bank(tmp_path, voices_dir=data_dir / "presets", encoder=forbid_encoding)
    with pytest.raises(VoiceNotFoundError) as info:
        bank.resolve(Voice.preset(name))
    assert "Cedar" in info.value.message  # lists valid names
    with pytest.raises(VoiceNotFoundError):
        bank.clip_path(name)


@pytest.mark.parametrize("fingerprint", ["../up", "..", ".", "a/b", "", "x" * 200])
def test_codec_fingerprint_cannot_escape_the_cache(tmp_path: Path, fingerprint: str) -> None:
    with pytest.raises(ValueError, match="codec_fingerprint"):
        make_bank(tmp_path, codec_fingerprint=fingerprint)


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
