"""`VoiceBank`: a preset, an upload or raw codes -> prompt codes [T, 16].

A preset takes the first of its sources that works (`sources.py`); a clip is encoded once by our
codec and kept on disk (`cache.py`). Decoding and the codec are injected, so this imports no torch.
A preset is listed as available only when it can speak now (codes at hand, a local source, or a
download allowed and not known to fail); otherwise its listing carries the clause its requests'
`VoiceUnavailableError` gives.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InvalidRequestError, PayloadTooLargeError, VoiceUnavailableError
from ..types import SAMPLE_RATE_HZ, SAMPLES_PER_FRAME, Voice, VoiceKind
from .cache import CodeCache
from .catalog import Preset, VoiceCatalog, VoiceSource, check_codes
from .sources import Fetch, PresetSources, SourceError, fetch_url

logger = logging.getLogger(__name__)

_NO_ENCODER = "needs the codec's encoder, which is not loaded"

_FINGERPRINT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # never "." or "..": no escape


@dataclass(frozen=True, slots=True)
class PresetInfo:
    name: str
    language: str
    gender: str
    description: str
    available: bool
    unavailable_reason: str | None
    has_clip: bool


@dataclass(frozen=True, slots=True)
class ResolvedVoice:
    """Prompt codes int64 [T, 16] (read-only), the clip's transcript if known, preset name, notice."""

    codes: np.ndarray
    transcript: str | None
    name: str | None
    notice: str | None = None


class VoiceBank:
    """Turns `Voice`s into prompt codes. Thread-safe; each clip is encoded once per codec.

    Args:
        catalog: the preset catalog (`load_catalog()`).
        voices_dir: reference clips under their catalog file names (and optionally the manifest).
        cache_dir: where codes (`<codec_fingerprint>/<sha256>.npy`) and downloads are kept.
        encoder: float32 [2, n] at 48 kHz -> int codes [F, 16]; None = clips cannot be encoded.
        codec_fingerprint: the codec weights' id, so codes of another codec are never reused.
        allow_download: fetch the manifest / clips from their pinned URLs when not found locally.
        max_clip_s / max_upload_bytes: uploads are trimmed to the first seconds / refused above.
        load_audio / to_codec_input / fetch: decoding, 48 kHz stereo conversion, downloads.
        max_cached_uploads: encoded uploads kept in memory (least recently used dropped first).
    """

    def __init__(self, catalog: VoiceCatalog, *, voices_dir: Path | None, cache_dir: Path,
                 encoder: Callable[[np.ndarray], np.ndarray] | None, codec_fingerprint: str,
                 allow_download: bool, max_clip_s: float = 20.0, max_upload_bytes: int = 25 * 1024 * 1024,
                 manifest_path: Path | None = None,
                 load_audio: Callable[[bytes], tuple[np.ndarray, int]] | None = None,
                 to_codec_input: Callable[[np.ndarray, int], np.ndarray] | None = None,
                 fetch: Fetch | None = None, max_cached_uploads: int = 64):
        if not isinstance(codec_fingerprint, str) or not _FINGERPRINT.fullmatch(codec_fingerprint):
            raise ValueError(
                f"codec_fingerprint must be 1-128 chars of [A-Za-z0-9._-], got {codec_fingerprint!r}"
            )
        if not max_clip_s * SAMPLE_RATE_HZ >= SAMPLES_PER_FRAME:
            raise ValueError(f"max_clip_s must be at least one frame (0.08 s), got {max_clip_s}")
        self.catalog = catalog
        self.allow_download = allow_download
        self.max_clip_s = float(max_clip_s)
        self.max_upload_bytes = int(max_upload_bytes)
        self.sources = PresetSources(catalog.manifest, voices_dir=voices_dir,
                                     downloads_dir=Path(cache_dir) / "downloads", allow_download=allow_download,
                                     fetch=fetch or fetch_url, manifest_path=manifest_path)
        self.code_cache = CodeCache(Path(cache_dir) / codec_fingerprint)
        self._encoder = encoder
        self._load_audio = load_audio
        self._to_codec_input = to_codec_input
        self._max_cached_uploads = max_cached_uploads
        # Striped locks: one key always maps to the same lock, so a clip is encoded once while
        # other voices proceed; the number of locks stays fixed however many uploads arrive.
        self._key_locks = tuple(threading.Lock() for _ in range(32))
        self._state_lock = threading.Lock()
        self._preset_codes: dict[str, np.ndarray] = {}
        self._uploads: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def default_voice(self) -> str:
        return self.catalog.default

    # ---- public ---------------------------------------------------------------------------------
    def list_presets(self) -> list[PresetInfo]:
        """Every preset with its availability, found without encoding or downloading anything."""
        return [self._info(preset) for preset in self.catalog.presets]

    def preset_info(self, name: str) -> PresetInfo | None:
        """One preset's entry of `list_presets`, by name (case-insensitive), None when there is no
        such preset; only that preset's sources are looked at (a request names one voice)."""
        preset = self.catalog.find(name)
        return None if preset is None else self._info(preset)

    def _info(self, preset: Preset) -> PresetInfo:
        reason = self._unavailable_reason(preset)
        return PresetInfo(preset.name, preset.language, preset.gender, preset.description,
                          reason is None, reason, self.sources.local_clip(preset.clip) is not None)

    def preset_for_language(self, language: str) -> str:
        """The preset that speaks `language` when a client names none in particular (OpenAI's voice
        names): the default voice if it speaks it and is available, else the first available preset
        of that language in catalog order, else the default voice."""
        default = self.catalog.get(self.catalog.default)
        for preset in (default, *(p for p in self.catalog.presets if p is not default)):
            if preset.language == language and self._unavailable_reason(preset) is None:
                return preset.name
        return default.name

    def clip_path(self, name: str) -> Path | None:
        """The local, sha256-verified reference clip of a preset (for audition), if there is one."""
        return self.sources.local_clip(self.catalog.get(name).clip)

    def resolve(self, voice: Voice | None) -> ResolvedVoice:
        """Prompt codes for a voice (None = the default preset)."""
        if voice is None:
            return self._resolve_preset(self.catalog.get(self.catalog.default))
        if voice.kind is VoiceKind.CODES:
            return ResolvedVoice(check_codes(voice.codes, "voice"), voice.transcript, None)
        if voice.kind is VoiceKind.AUDIO:
            return self._resolve_upload(voice)
        return self._resolve_preset(self.catalog.get(voice.name or ""))

    # ---- presets --------------------------------------------------------------------------------
    def _key_lock(self, key: str) -> threading.Lock:
        return self._key_locks[hash(key) % len(self._key_locks)]

    def _resolve_preset(self, preset: Preset) -> ResolvedVoice:
        key = preset.name.casefold()
        with self._key_lock("preset:" + key):
            codes = self._preset_codes.get(key)
            if codes is None:
                problems = []
                for source in preset.sources:
                    try:
                        codes = self._codes_from(source)
                        break
                    except SourceError as exc:
                        problems.append(str(exc))
                else:
                    reason = self._unavailable_reason(preset) or "; ".join(problems)
                    raise VoiceUnavailableError(
                        f"voice {preset.name!r} is unavailable: it {reason}; choose another voice", param="voice",
                        code="voice_unavailable",
                    )
                with self._state_lock:
                    self._preset_codes[key] = codes
        return ResolvedVoice(codes, preset.transcript, preset.name)

    def _codes_from(self, source: VoiceSource) -> np.ndarray:
        if source.type == "onnx_manifest":
            codes = self.sources.manifest_codes(download=self.allow_download).get(source.voice or "")
            if codes is None:
                raise SourceError(f"needs voice {source.voice!r}, which the ONNX release's manifest lacks")
            return codes
        assert source.sha256 is not None and source.file is not None
        cached = self.code_cache.get(source.sha256)
        if cached is not None:
            return cached
        if self._encoder is None:
            raise SourceError(_NO_ENCODER)
        data = self.sources.clip_bytes(source)
        logger.info("encoding reference clip %s (%d bytes)", source.file, len(data))
        codes = self._encode(self._prepare_audio(data))
        self.code_cache.put(source.sha256, codes)
        return codes

    def _unavailable_reason(self, preset: Preset) -> str | None:
        """None when the preset can speak now, else why not, as what it "needs" (one clause, no
        URL or path): its clip's problem when it has a clip (the source a user can supply), else
        its other source's."""
        if preset.name.casefold() in self._preset_codes:
            return None
        problems = []
        for source in preset.sources:
            problem = self._source_problem(source)
            if problem is None:
                return None
            problems.append((source.type == "clip", problem))
        return max(problems, key=lambda p: p[0])[1]

    def _source_problem(self, source: VoiceSource) -> str | None:
        """None when `source` gives codes now (or after a download not known to fail), else why not."""
        if source.type == "onnx_manifest":
            try:
                manifest = self.sources.manifest_codes(download=False)
            except SourceError as exc:
                if not self.allow_download:
                    return f"{exc}, and downloads are off"
                failed = self.sources.download_problem(self.catalog.manifest.url)
                return None if failed is None else f"needs the ONNX release's {self.catalog.manifest.file}, which {failed}"
            if source.voice in manifest:
                return None
            return f"needs voice {source.voice!r}, which the ONNX release's manifest lacks"
        if source.sha256 and source.sha256 in self.code_cache:
            return None
        if self._encoder is None:
            return _NO_ENCODER
        if self.sources.local_clip(source) is not None:
            return None
        if not self.allow_download:
            return f"{self.sources.clip_problem(source)}, and downloads are off"
        failed = self.sources.download_problem(source.url or "")
        return None if failed is None else f"needs its clip {source.file}, which {failed}"

    # ---- uploads --------------------------------------------------------------------------------
    def _resolve_upload(self, voice: Voice) -> ResolvedVoice:
        data = voice.audio
        if isinstance(data, str):
            size = os.path.getsize(data) if os.path.isfile(data) else -1
            if size < 0:
                raise InvalidRequestError(f"reference audio file not found: {data}", param="ref_audio")
            if size > self.max_upload_bytes:
                raise self._too_large(size)
            try:
                data = Path(data).read_bytes()
            except OSError as exc:
                raise InvalidRequestError(f"cannot read reference audio file: {exc.strerror or exc}",
                                          param="ref_audio") from exc
        if not isinstance(data, bytes):
            raise InvalidRequestError("reference audio must be a file path or bytes", param="ref_audio")
        if len(data) > self.max_upload_bytes:
            raise self._too_large(len(data))
        wav = self._prepare_audio(data)  # [2, n] at 48 kHz; decoding errors name param ref_audio
        num_samples = wav.shape[1]
        if num_samples < SAMPLES_PER_FRAME:
            raise InvalidRequestError(
                f"reference audio is {num_samples / SAMPLE_RATE_HZ * 1000:.0f} ms long; it must be at least "
                "80 ms (one codec frame), and clean 3-10 s speech works best", param="ref_audio",
                code="audio_too_short",
            )
        notice = None
        max_samples = int(self.max_clip_s * SAMPLE_RATE_HZ)
        if num_samples > max_samples:
            wav = wav[:, :max_samples]
            notice = (f"The reference clip is {num_samples / SAMPLE_RATE_HZ:.1f} s long, so only its first "
                      f"{self.max_clip_s:g} s were used; a clean 3-10 s clip works best.")
            if voice.transcript:
                notice += " Its transcript (ref_text) may no longer match the trimmed audio."
        if float(np.abs(wav).max()) < 1e-4:
            raise InvalidRequestError("reference audio is silent: upload a clip of someone speaking",
                                      param="ref_audio", code="silent_audio")
        if self._encoder is None:
            raise VoiceUnavailableError("voice cloning needs the codec encoder, which is not loaded",
                                        param="ref_audio")
        key = hashlib.sha256(f"{wav.shape}".encode() + wav.astype("<f4").tobytes()).hexdigest()
        with self._key_lock("upload:" + key):
            with self._state_lock:
                codes = self._uploads.get(key)
                if codes is not None:
                    self._uploads.move_to_end(key)
            if codes is None:
                codes = self.code_cache.get(key)
                if codes is None:
                    codes = self._encode(wav)
                    self.code_cache.put(key, codes)
                with self._state_lock:
                    self._uploads[key] = codes
                    while len(self._uploads) > self._max_cached_uploads:
                        self._uploads.popitem(last=False)
        return ResolvedVoice(codes, voice.transcript, None, notice)

    def _too_large(self, size: int) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"reference audio is {size / 1e6:.1f} MB; the limit is {self.max_upload_bytes / 1e6:.1f} MB "
            "(a 3-10 s clip is plenty)", param="ref_audio", code="audio_too_large",
        )

    # ---- audio and encoder ----------------------------------------------------------------------
    def _prepare_audio(self, data: bytes) -> np.ndarray:
        load, convert = self._load_audio, self._to_codec_input
        if load is None or convert is None:
            from ..audio import io as audio  # imported on first use only

            load, convert = load or audio.load_audio, convert or audio.to_codec_input
        wav, sample_rate = load(data)
        return np.ascontiguousarray(convert(wav, sample_rate), dtype=np.float32)  # [2, n] at 48 kHz

    def _encode(self, wav: np.ndarray) -> np.ndarray:
        assert self._encoder is not None
        if wav.ndim != 2 or wav.shape[0] != 2:
            raise ValueError(f"encoder input must be [2, n], got {list(wav.shape)}")
        return check_codes(self._encoder(wav), "codec encoder output")
