"""The preset catalog: its content (broad, pinned, no public figures) and the parsing rules."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from support.voice_helpers import raw_catalog

from tts_core.voices import load_catalog, parse_catalog

PINNED_COMMIT = "42b46456f414b66e7e1df72bd88180322e243b40"
# Public figures the upstream assets imitate, and upstream built-in names (real or franchise names).
BANNED_NAMES = ("trump", "taylor", "swift", "杨幂", "yang mi", "xiaoyu", "junhao", "zhiming", "weiguo",
                "yuewen", "lingyu", "ava", "bella", "adam", "nathan", "soyo", "saki", "mortis", "umiri",
                "mei", "anon", "arisa", "togawa", "sakura", "yui", "aoi", "hina")
BANNED_SOURCES = {"en_1.wav", "en_7.wav", "zh_11.wav", "zh_2.wav", "zh_5.wav"}
BANNED_MANIFEST_VOICES = {"Trump", "Xiaoyu"}


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
