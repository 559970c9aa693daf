"""Preset voice catalog and `VoiceBank`: a preset, an upload or raw codes -> prompt codes [T, 16].

Presets come from `voices_catalog.json` (ARCHITECTURE §7). Each lists sources in preference order:
pre-encoded codes from the official ONNX release's `browser_poc_manifest.json`, then a reference
clip pinned by sha256 that our codec encodes once (cached on disk per codec). Audio decoding and the
codec are injected callables, so importing this module needs neither torch nor the codec.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InvalidRequestError, PayloadTooLargeError, VoiceNotFoundError, VoiceUnavailableError
from .types import CODEBOOK_SIZE, NUM_CODEBOOKS, SAMPLE_RATE_HZ, SAMPLES_PER_FRAME, Voice, VoiceKind

logger = logging.getLogger(__name__)

CATALOG_PATH = Path(__file__).with_name("voices_catalog.json")
LANGUAGES = ("zh", "en", "ja")
GENDERS = ("female", "male")
MAX_CLIP_DOWNLOAD_BYTES = 16 * 1024 * 1024
DOWNLOAD_TIMEOUT_S = 30.0
DOWNLOAD_RETRY_S = 60.0  # a failed download is not retried by every request
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9 _-]{0,31}")
_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_FINGERPRINT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # never "." or "..": no escape
_OFFLINE_HINT = (
    "offline: set MOSS_TTS_VOICES_DIR to a folder with the reference clips (and browser_poc_manifest.json), "
    "or allow downloads"
)

Fetch = Callable[[str, int, float], bytes]  # (url, max_bytes, timeout_s) -> body


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
        if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
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
    if not _HEX64.fullmatch(manifest.sha256) or not _FILE.fullmatch(manifest.file) or manifest.size < 1:
        raise ValueError("catalog manifest needs a plain file name, a size and a sha256")
    catalog = VoiceCatalog(tuple(presets), str(data.get("default", "")), manifest)
    default = catalog.find(catalog.default)
    if default is None or default.clip is None:
        raise ValueError(f"default voice {catalog.default!r} must be a preset with a reference clip")
    return catalog


def load_catalog(path: str | os.PathLike | None = None) -> VoiceCatalog:
    """Read and validate the catalog (default: the `voices_catalog.json` shipped with tts_core)."""
    return parse_catalog(json.loads(Path(path or CATALOG_PATH).read_text(encoding="utf-8")))


def voices_dir_from_env() -> Path | None:
    value = os.environ.get("MOSS_TTS_VOICES_DIR")
    return Path(value).expanduser() if value else None


def fetch_url(url: str, max_bytes: int, timeout_s: float) -> bytes:
    """GET an https URL with a size cap and an overall deadline (raises OSError / ValueError)."""
    if not url.startswith("https://"):
        raise ValueError(f"refusing to download from a non-https URL: {url}")
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, headers={"User-Agent": "moss-tts-studio"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise ValueError(f"{url} is {int(declared)} bytes, more than the {max_bytes}-byte limit")
        body = bytearray()
        while block := response.read(1 << 16):
            body += block
            if len(body) > max_bytes:
                raise ValueError(f"{url} is larger than the {max_bytes}-byte limit")
            if time.monotonic() > deadline:
                raise TimeoutError(f"download of {url} took longer than {timeout_s:.0f} s")
    return bytes(body)


def encoder_from_codec(codec: Any) -> Callable[[np.ndarray], np.ndarray]:
    """Adapt `codec.encode_clip(Tensor[2, n]) -> LongTensor[F, 16]` to numpy in, numpy out."""
    import torch  # only when a real codec is wired in

    def encode(wav: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return codec.encode_clip(torch.as_tensor(wav, dtype=torch.float32)).cpu().numpy()

    return encode


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_codes(codes: Any, what: str) -> np.ndarray:
    array = np.asarray(codes)
    if array.ndim != 2 or array.shape[1] != NUM_CODEBOOKS or array.shape[0] < 1:
        raise ValueError(f"{what}: codes must be [T >= 1, {NUM_CODEBOOKS}], got {list(array.shape)}")
    if not np.issubdtype(array.dtype, np.integer) or array.min() < 0 or array.max() >= CODEBOOK_SIZE:
        raise ValueError(f"{what}: codes must be integers in [0, {CODEBOOK_SIZE})")
    array = np.ascontiguousarray(array, dtype=np.int64)
    array.setflags(write=False)
    return array


def _suffix_for(data: bytes) -> str:
    """File suffix from content: several upstream "*.wav" clips are really FLAC or MP3."""
    if data[:4] == b"fLaC":
        return ".flac"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return ".mp3"
    return ".ogg" if data[:4] == b"OggS" else ".wav"


def _write_atomic(path: Path, write: Callable[[Any], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _SourceError(Exception):
    """A source of a preset could not be used; the message says why, in one clause."""


class VoiceBank:
    """Turns `Voice`s into prompt codes. Thread-safe; each clip is encoded once per codec.

    Args:
        catalog: the preset catalog (`load_catalog()`).
        voices_dir: folder holding the reference clips under their catalog file names (and
            optionally `browser_poc_manifest.json`); None = no local clips.
        cache_dir: where codes (`<codec_fingerprint>/<sha256>.npy`) and downloads are kept.
        encoder: float32 [2, n] at 48 kHz -> int codes [F, 16]; None = clips cannot be encoded.
        codec_fingerprint: identifies the codec weights, so codes of another codec are never reused.
        allow_download: fetch the manifest / clips from their pinned URLs when not found locally.
        max_clip_s: uploads longer than this are trimmed to their first `max_clip_s` seconds.
        max_upload_bytes: larger uploads are refused (PayloadTooLargeError).
        manifest_path: an explicit local copy of `browser_poc_manifest.json`.
        load_audio / to_codec_input: decoding and 48 kHz stereo conversion (default: tts_core.audio).
        fetch: downloader `(url, max_bytes, timeout_s) -> bytes` (default: `fetch_url`).
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
        self.voices_dir = Path(voices_dir) if voices_dir is not None else None
        self.cache_dir = Path(cache_dir)
        self.allow_download = allow_download
        self.max_clip_s = float(max_clip_s)
        self.max_upload_bytes = int(max_upload_bytes)
        self._codes_dir = self.cache_dir / codec_fingerprint
        self._downloads_dir = self.cache_dir / "downloads"
        self._encoder = encoder
        self._manifest_path = manifest_path
        self._load_audio = load_audio
        self._to_codec_input = to_codec_input
        self._fetch = fetch or fetch_url
        self._max_cached_uploads = max_cached_uploads
        # Striped locks: one key always maps to the same lock, so a clip is encoded once while
        # other voices proceed; the number of locks stays fixed however many uploads arrive.
        self._key_locks = tuple(threading.Lock() for _ in range(32))
        self._state_lock = threading.Lock()
        self._manifest_lock = threading.Lock()
        self._download_lock = threading.Lock()
        self._manifest: dict[str, np.ndarray] | None = None
        self._preset_codes: dict[str, np.ndarray] = {}
        self._uploads: OrderedDict[str, np.ndarray] = OrderedDict()
        self._file_sha: dict[tuple[str, int, int], str] = {}
        self._failed_downloads: dict[str, float] = {}

    @property
    def default_voice(self) -> str:
        return self.catalog.default

    # ---- public ---------------------------------------------------------------------------------
    def list_presets(self) -> list[PresetInfo]:
        """Every preset with its availability, found without encoding or downloading anything."""
        infos = []
        for preset in self.catalog.presets:
            reason = self._unavailable_reason(preset)
            infos.append(PresetInfo(preset.name, preset.language, preset.gender, preset.description,
                                    reason is None, reason, self._local_clip(preset.clip) is not None))
        return infos

    def clip_path(self, name: str) -> Path | None:
        """The local, sha256-verified reference clip of a preset (for audition), if there is one."""
        return self._local_clip(self.catalog.get(name).clip)

    def resolve(self, voice: Voice | None) -> ResolvedVoice:
        """Prompt codes for a voice (None = the default preset)."""
        if voice is None:
            return self._resolve_preset(self.catalog.get(self.catalog.default))
        if voice.kind is VoiceKind.CODES:
            return ResolvedVoice(_check_codes(voice.codes, "voice"), voice.transcript, None)
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
                    except _SourceError as exc:
                        problems.append(str(exc))
                else:
                    hint = "" if self.allow_download else f" ({_OFFLINE_HINT})"
                    raise VoiceUnavailableError(
                        f"voice {preset.name!r} is unavailable: {'; '.join(problems)}{hint}", param="voice",
                        code="voice_unavailable",
                    )
                with self._state_lock:
                    self._preset_codes[key] = codes
        return ResolvedVoice(codes, preset.transcript, preset.name)

    def _codes_from(self, source: VoiceSource) -> np.ndarray:
        if source.type == "onnx_manifest":
            codes = self._manifest_codes(download=self.allow_download).get(source.voice or "")
            if codes is None:
                raise _SourceError(f"the ONNX manifest has no voice {source.voice!r}")
            return codes
        assert source.sha256 is not None and source.file is not None
        cached = self._load_cached(source.sha256)
        if cached is not None:
            return cached
        if self._encoder is None:
            raise _SourceError(f"clip {source.file} needs the codec encoder, which is not loaded")
        data = self._clip_bytes(source)
        logger.info("encoding reference clip %s (%d bytes)", source.file, len(data))
        codes = self._encode(self._prepare_audio(data))
        self._store_cached(source.sha256, codes)
        return codes

    def _unavailable_reason(self, preset: Preset) -> str | None:
        if preset.name.casefold() in self._preset_codes:
            return None
        problems = []
        for source in preset.sources:
            if source.type == "onnx_manifest":
                try:
                    manifest = self._manifest_codes(download=False)
                except _SourceError as exc:
                    if self.allow_download:
                        return None  # fetched on first use
                    problems.append(str(exc))
                    continue
                if source.voice in manifest:
                    return None
                problems.append(f"the ONNX manifest has no voice {source.voice!r}")
            elif source.sha256 and self._cache_file(source.sha256).is_file():
                return None
            elif self._encoder is None:
                problems.append(f"clip {source.file} needs the codec encoder, which is not loaded")
            elif self._local_clip(source) is not None or self.allow_download:
                return None
            else:
                problems.append(self._clip_problem(source))
        hint = "" if self.allow_download else f" ({_OFFLINE_HINT})"
        return "; ".join(problems) + hint

    # ---- clips ----------------------------------------------------------------------------------
    def _verified_sha(self, path: Path) -> str | None:
        """sha256 of a local file, memoised by (path, size, mtime)."""
        try:
            stat = path.stat()
        except OSError:
            return None
        if stat.st_size > MAX_CLIP_DOWNLOAD_BYTES:
            return "too-large"
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        with self._state_lock:
            known = self._file_sha.get(key)
        if known is None:
            known = _sha256(path.read_bytes())
            with self._state_lock:
                self._file_sha[key] = known
        return known

    def _local_clip(self, source: VoiceSource | None) -> Path | None:
        if source is None or source.sha256 is None or source.file is None:
            return None
        candidates = [self.voices_dir / source.file] if self.voices_dir is not None else []
        candidates += [self._downloads_dir / (source.sha256 + s) for s in (".wav", ".flac", ".mp3", ".ogg")]
        return next((p for p in candidates if p.is_file() and self._verified_sha(p) == source.sha256), None)

    def _clip_problem(self, source: VoiceSource) -> str:
        if self.voices_dir is None:
            return f"clip {source.file} not found (no voices folder configured)"
        path = self.voices_dir / str(source.file)
        if not path.is_file():
            return f"clip {source.file} not found in {self.voices_dir}"
        return f"clip {path} does not match its pinned sha256 {source.sha256[:12]}… (not used)"

    def _clip_bytes(self, source: VoiceSource) -> bytes:
        """The clip's bytes from the voices folder, the download cache or its URL; sha256 verified."""
        assert source.sha256 is not None and source.url is not None
        path = self._local_clip(source)
        if path is not None:
            data = path.read_bytes()
            if _sha256(data) == source.sha256:  # re-checked on the bytes actually used
                return data
        if self.voices_dir is not None and (self.voices_dir / str(source.file)).is_file():
            logger.warning("%s", self._clip_problem(source))  # a changed or corrupted local clip
        if not self.allow_download:
            raise _SourceError(self._clip_problem(source))
        data = self._download(source.url, MAX_CLIP_DOWNLOAD_BYTES, source.sha256)
        self._keep(self._downloads_dir / (source.sha256 + _suffix_for(data)), data)
        return data

    @staticmethod
    def _keep(path: Path, data: bytes) -> None:
        """Save a verified download; a read-only cache only costs a later re-download."""
        try:
            _write_atomic(path, lambda handle: handle.write(data))
        except OSError as exc:
            logger.warning("could not keep %s: %s", path, exc)

    def _download(self, url: str, max_bytes: int, sha256: str) -> bytes:
        with self._state_lock:
            failed_at = self._failed_downloads.get(url)
        if failed_at is not None and time.monotonic() - failed_at < DOWNLOAD_RETRY_S:
            raise _SourceError(f"download of {url} failed recently; retrying later")
        logger.info("downloading %s", url)
        try:
            data = self._fetch(url, max_bytes, DOWNLOAD_TIMEOUT_S)
            if _sha256(data) != sha256:
                raise ValueError(f"sha256 mismatch (expected {sha256[:12]}…)")
        except (OSError, ValueError) as exc:  # URLError and TimeoutError are OSErrors
            with self._state_lock:
                self._failed_downloads[url] = time.monotonic()
            raise _SourceError(f"download of {url} failed: {exc}") from exc
        return data

    # ---- manifest -------------------------------------------------------------------------------
    def _manifest_codes(self, *, download: bool) -> dict[str, np.ndarray]:
        ref = self.catalog.manifest
        with self._manifest_lock:  # held only for local files, never during a download
            if self._manifest is None:
                data = self._local_manifest_bytes()
                if data is not None:
                    self._manifest = self._parse_manifest(data)
            if self._manifest is not None:
                return self._manifest
        if not download:
            raise _SourceError(f"the ONNX manifest {ref.file} is not available locally")
        with self._download_lock:  # one download at a time; never taken while holding _manifest_lock
            with self._manifest_lock:
                if self._manifest is not None:
                    return self._manifest
            data = self._download(ref.url, ref.size, ref.sha256)
            self._keep(self._downloads_dir / f"{ref.sha256}.json", data)
            parsed = self._parse_manifest(data)
            with self._manifest_lock:
                self._manifest = parsed
            return parsed

    def _local_manifest_bytes(self) -> bytes | None:
        ref = self.catalog.manifest
        candidates = (self._manifest_path, self.voices_dir / ref.file if self.voices_dir else None,
                      self._downloads_dir / f"{ref.sha256}.json")
        for path in candidates:
            if path is None or not path.is_file() or path.stat().st_size != ref.size:
                continue
            data = path.read_bytes()
            if _sha256(data) == ref.sha256:
                return data
            logger.warning("%s does not match the pinned manifest sha256; not used", path)
        return None

    @staticmethod
    def _parse_manifest(data: bytes) -> dict[str, np.ndarray]:
        try:
            entries = json.loads(data)["builtin_voices"]
        except (ValueError, KeyError, TypeError) as exc:
            raise _SourceError(f"the ONNX manifest cannot be read ({exc})") from exc
        voices = {}
        for entry in entries if isinstance(entries, list) else []:
            try:
                voices[str(entry["voice"])] = _check_codes(entry["prompt_audio_codes"], str(entry["voice"]))
            except (KeyError, TypeError, ValueError) as exc:
                logger.warning("skipping a manifest voice: %s", exc)
        return voices

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
                codes = self._load_cached(key)
                if codes is None:
                    codes = self._encode(wav)
                    self._store_cached(key, codes)
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

    # ---- audio, encoder, disk cache -------------------------------------------------------------
    def _prepare_audio(self, data: bytes) -> np.ndarray:
        load, convert = self._load_audio, self._to_codec_input
        if load is None or convert is None:
            from . import audio  # imported on first use only

            load, convert = load or audio.load_audio, convert or audio.to_codec_input
        wav, sample_rate = load(data)
        return np.ascontiguousarray(convert(wav, sample_rate), dtype=np.float32)  # [2, n] at 48 kHz

    def _encode(self, wav: np.ndarray) -> np.ndarray:
        assert self._encoder is not None
        if wav.ndim != 2 or wav.shape[0] != 2:
            raise ValueError(f"encoder input must be [2, n], got {list(wav.shape)}")
        return _check_codes(self._encoder(wav), "codec encoder output")

    def _cache_file(self, key: str) -> Path:
        if not _HEX64.fullmatch(key):  # keys are hex digests only: no path can be built from input
            raise ValueError(f"bad cache key {key!r}")
        return self._codes_dir / f"{key}.npy"

    def _load_cached(self, key: str) -> np.ndarray | None:
        path = self._cache_file(key)
        if not path.is_file():
            return None
        try:
            return _check_codes(np.load(path, allow_pickle=False), str(path))
        except (OSError, ValueError, EOFError) as exc:
            logger.warning("ignoring unreadable cached codes %s: %s", path, exc)
            path.unlink(missing_ok=True)
            return None

    def _store_cached(self, key: str, codes: np.ndarray) -> None:
        try:
            _write_atomic(self._cache_file(key), lambda handle: np.save(handle, codes, allow_pickle=False))
        except OSError as exc:  # a read-only cache must not fail the request
            logger.warning("could not cache voice codes in %s: %s", self._codes_dir, exc)
