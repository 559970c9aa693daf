"""Preset sources: offline behaviour, sha256 pinning of clips and manifest, downloads."""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import numpy as np
import pytest
from support.voice_helpers import CountingEncoder, forbid_encoding, make_bank, small_catalog, wav_bytes

from tts_core.errors import VoiceUnavailableError
from tts_core.types import NUM_CODEBOOKS, Voice
from tts_core.voices import fetch_url, load_catalog


def test_offline_unavailable_preset_is_reported_and_others_work(tmp_path: Path, data_dir: Path) -> None:
    bank = make_bank(tmp_path, catalog=small_catalog(data_dir), voices_dir=data_dir / "presets",
                     encoder=CountingEncoder())
    infos = {p.name: p for p in bank.list_presets()}
    assert not infos["Ghost"].available
    assert infos["Ghost"].unavailable_reason == (
        "needs its clip missing.wav, which is not in the voices folder, and downloads are off")
    with pytest.raises(VoiceUnavailableError) as info:
        bank.resolve(Voice.preset("ghost"))
    assert info.value.message == ("voice 'Ghost' is unavailable: it needs its clip missing.wav, which is not in "
                                  "the voices folder, and downloads are off; choose another voice")
    assert info.value.param == "voice" and info.value.code == "voice_unavailable"
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
    with pytest.raises(VoiceUnavailableError, match="could not be downloaded") as info:
        bank.resolve(Voice.preset("Anchor"))  # manifest and clip both come back wrong
    assert "https" not in info.value.message and "sha256 mismatch" not in info.value.message  # the log has them


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


def test_a_failed_download_is_not_retried_by_every_request(tmp_path: Path) -> None:
    requested = []

    def fetch(url: str, max_bytes: int, timeout_s: float) -> bytes:
        requested.append(url)
        raise OSError("network is unreachable")

    bank = make_bank(tmp_path, voices_dir=None, encoder=CountingEncoder(), allow_download=True, fetch=fetch)
    with pytest.raises(VoiceUnavailableError, match=r"could not be downloaded \(no network\?\)"):
        bank.resolve(Voice.preset("Willow"))
    tried = len(requested)
    assert tried >= 1
    with pytest.raises(VoiceUnavailableError, match=r"no network\?"):
        bank.resolve(Voice.preset("Willow"))
    assert len(requested) == tried


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_after_a_failed_download_the_list_tells_the_truth(tmp_path: Path, data_dir: Path) -> None:
    """Downloads allowed but no network (a real refused connection): once a download has failed, no
    preset that needs one is listed as available, each with a reason free of URLs and socket errors;
    presets with their clip on disk still are; a later successful download brings them back."""
    network = {"up": False}
    port = _closed_port()

    def fetch(url: str, max_bytes: int, timeout_s: float) -> bytes:
        if network["up"]:
            name = url.rsplit("/", 1)[1]
            return (data_dir / "presets" / name).read_bytes()
        return fetch_url(f"https://127.0.0.1:{port}/{url.rsplit('/', 1)[1]}", max_bytes, timeout_s)

    voices = tmp_path / "voices"
    voices.mkdir()
    (voices / "en_3.wav").write_bytes((data_dir / "presets" / "en_3.wav").read_bytes())  # Willow's clip
    bank = make_bank(tmp_path, voices_dir=voices, encoder=CountingEncoder(), allow_download=True, fetch=fetch)
    assert all(p.available for p in bank.list_presets())  # nothing has failed yet: downloads may work
    with pytest.raises(VoiceUnavailableError) as info:
        bank.resolve(Voice.preset("Quill"))  # the manifest, then the clip: both refused
    assert info.value.message == ("voice 'Quill' is unavailable: it needs its clip en_2.wav, which could not be "
                                  "downloaded (no network?); choose another voice")
    infos = {p.name: p for p in bank.list_presets()}
    assert [name for name, p in infos.items() if p.available] == ["Willow"]
    assert infos["Sora"].unavailable_reason == ("needs the ONNX release's browser_poc_manifest.json, which could "
                                                "not be downloaded (no network?)")
    assert infos["Nova"].unavailable_reason == "needs its clip en_6.wav, which could not be downloaded (no network?)"
    for info in infos.values():
        assert "http" not in (info.unavailable_reason or "") and "refused" not in (info.unavailable_reason or "")
    network["up"] = True
    assert bank.resolve(Voice.preset("Nova")).codes.shape[1] == NUM_CODEBOOKS  # never tried: a request tries
    assert {p.name: p for p in bank.list_presets()}["Quill"].available  # a download worked: the network is back


def test_fetch_url_refuses_plain_http() -> None:
    with pytest.raises(ValueError, match="non-https"):
        fetch_url("http://example.com/clip.wav", 1024, 1.0)
