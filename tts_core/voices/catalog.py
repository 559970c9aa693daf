"""The preset catalog (`catalog.json`, docs/spec/LM.md §7) and the prompt-codes contract.

Each preset lists its sources in preference order: pre-encoded codes from the official ONNX
release's `browser_poc_manifest.json`, then a reference clip pinned by sha256. Parsing validates
every field, so nothing read from the catalog can name a path outside its folder.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import VoiceNotFoundError
from ..types import CODEBOOK_SIZE, NUM_CODEBOOKS

CATALOG_PATH = Path(__file__).with_name("catalog.json")
LANGUAGES = ("zh", "en", "ja")
GENDERS = ("female", "male")
HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9 _-]{0,31}")
_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, slots=True)
class VoiceSource:
    """One way to obtain a preset's codes: `onnx_manifest` (voice) or `clip` (file, sha256, url)."""

    type: str
    voice: str | None = None
    file: str | None = None
    sha256: str | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    language: str
    gender: str
    description: str
    sources: tuple[VoiceSource, ...]
    transcript: str | None = None

    @property
    def clip(self) -> VoiceSource | None:
        return next((s for s in self.sources if s.type == "clip"), None)


@dataclass(frozen=True, slots=True)
class ManifestRef:
    """The pinned ONNX-release manifest that holds pre-encoded `prompt_audio_codes`."""

    repo: str
    revision: str
    file: str
    size: int
    sha256: str
    url: str


@dataclass(frozen=True, slots=True)
class VoiceCatalog:
    presets: tuple[Preset, ...]
    default: str
    manifest: ManifestRef

    def find(self, name: str) -> Preset | None:
        wanted = name.strip().casefold()
        return next((p for p in self.presets if p.name.casefold() == wanted), None)

    def get(self, name: str) -> Preset:
        preset = self.find(name)
        if preset is None:
            names = [p.name for p in self.presets]
            shown = ", ".join(names[:8]) + (f", … ({len(names)} in all)" if len(names) > 8 else "")
            raise VoiceNotFoundError(
                f"unknown voice {name[:64]!r}: choose a preset such as {shown}", param="voice",
                code="voice_not_found",
            )
        return preset


def check_codes(codes: Any, what: str) -> np.ndarray:
    """Prompt codes as a read-only int64 [T >= 1, 16] array with values in the codebook range."""
    array = np.asarray(codes)
    if array.ndim != 2 or array.shape[1] != NUM_CODEBOOKS or array.shape[0] < 1:
        raise ValueError(f"{what}: codes must be [T >= 1, {NUM_CODEBOOKS}], got {list(array.shape)}")
    if not np.issubdtype(array.dtype, np.integer) or array.min() < 0 or array.max() >= CODEBOOK_SIZE:
        raise ValueError(f"{what}: codes must be integers in [0, {CODEBOOK_SIZE})")
    array = np.ascontiguousarray(array, dtype=np.int64)
    array.setflags(write=False)
    return array


def _parse_source(raw: dict[str, Any], where: str) -> VoiceSource:
    kind = raw.get("type")
    if kind == "onnx_manifest":
        if not isinstance(raw.get("voice"), str) or not raw["voice"]:
            raise ValueError(f"{where}: onnx_manifest source needs a 'voice'")
        return VoiceSource(type=kind, voice=raw["voice"])
    if kind == "clip":
        file, sha, url = raw.get("file"), raw.get("sha256"), raw.get("url")
        if not isinstance(file, str) or not _FILE.fullmatch(file) or ".." in file:
            raise ValueError(f"{where}: clip file {file!r} must be a plain file name")
        if not isinstance(sha, str) or not HEX64.fullmatch(sha):
            raise ValueError(f"{where}: clip sha256 must be 64 lowercase hex digits")
        if not isinstance(url, str) or not url.startswith("https://") or not url.endswith("/" + file):
            raise ValueError(f"{where}: clip url must be https and end with /{file}")
        return VoiceSource(type=kind, file=file, sha256=sha, url=url)
    raise ValueError(f"{where}: unknown source type {kind!r}")


def parse_catalog(data: dict[str, Any]) -> VoiceCatalog:
    """Validate a catalog mapping (the JSON file's content); raises ValueError on any problem."""
    presets, seen = [], set()
    for index, raw in enumerate(data.get("presets") or []):
        name = raw.get("name")
        where = f"preset #{index} ({name!r})"
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name.casefold() in seen:
            raise ValueError(f"{where}: names must be unique, 1-32 chars, [A-Za-z0-9 _-], letter first")
        seen.add(name.casefold())
        if raw.get("language") not in LANGUAGES or raw.get("gender") not in GENDERS:
            raise ValueError(f"{where}: language must be one of {LANGUAGES}, gender one of {GENDERS}")
        description = raw.get("description")
        if not isinstance(description, str) or not description.strip() or "\n" in description:
            raise ValueError(f"{where}: description must be one non-empty line")
        sources = tuple(_parse_source(s, where) for s in raw.get("sources") or [])
        if not sources:
            raise ValueError(f"{where}: at least one source is needed")
        transcript = raw.get("transcript")
        if transcript is not None and (not isinstance(transcript, str) or not transcript.strip()):
            raise ValueError(f"{where}: transcript must be a non-empty string when given")
        presets.append(Preset(name, raw["language"], raw["gender"], description, sources, transcript))
    manifest = ManifestRef(**data["manifest"])
    if not HEX64.fullmatch(manifest.sha256) or not _FILE.fullmatch(manifest.file) or manifest.size < 1:
        raise ValueError("catalog manifest needs a plain file name, a size and a sha256")
    catalog = VoiceCatalog(tuple(presets), str(data.get("default", "")), manifest)
    default = catalog.find(catalog.default)
    if default is None or default.clip is None:
        raise ValueError(f"default voice {catalog.default!r} must be a preset with a reference clip")
    return catalog


def load_catalog(path: str | os.PathLike | None = None) -> VoiceCatalog:
    """Read and validate the catalog (default: the `catalog.json` shipped with tts_core.voices)."""
    return parse_catalog(json.loads(Path(path or CATALOG_PATH).read_text(encoding="utf-8")))
