"""Shared pieces of the voice tests: a deterministic stand-in encoder, WAV bytes, bank and catalog builders."""

from __future__ import annotations

import copy
import io
import json
import threading
from pathlib import Path

import numpy as np
import soundfile as sf

from tts_core.types import NUM_CODEBOOKS
from tts_core.voices import CATALOG_PATH, VoiceBank, load_catalog, parse_catalog


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
