"""Voices: the preset catalog, where presets' codes come from, the encoded-voice cache, the bank.

`catalog` (data and its rules) <- `cache` (codes on disk) <- `sources` (manifest, clips,
downloads) <- `bank` (`VoiceBank`: any `Voice` -> prompt codes). No module here imports torch.
"""

from __future__ import annotations

from .bank import PresetInfo, ResolvedVoice, VoiceBank
from .cache import CodeCache
from .catalog import CATALOG_PATH, ManifestRef, Preset, VoiceCatalog, VoiceSource, load_catalog, parse_catalog
from .sources import PresetSources, fetch_url

__all__ = [
    "CATALOG_PATH",
    "CodeCache",
    "ManifestRef",
    "Preset",
    "PresetInfo",
    "PresetSources",
    "ResolvedVoice",
    "VoiceBank",
    "VoiceCatalog",
    "VoiceSource",
    "fetch_url",
    "load_catalog",
    "parse_catalog",
]
