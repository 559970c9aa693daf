"""Where a preset's codes come from: the ONNX manifest's pre-encoded codes, or a reference clip.

Every byte used is checked against the sha256 pinned in the catalog, wherever it comes from.
Downloads are capped in size and time; a failure is remembered until a download succeeds, so a
preset that needs it is listed unavailable (`download_problem`) rather than retried by every
request. `SourceError` messages are clauses for people (no URL, no path); details go to the log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .cache import write_atomic
from .catalog import ManifestRef, VoiceCatalog, VoiceSource, check_codes

logger = logging.getLogger(__name__)

MAX_CLIP_DOWNLOAD_BYTES = 16 * 1024 * 1024
DOWNLOAD_TIMEOUT_S = 30.0
DOWNLOAD_RETRY_S = 60.0  # a failed download is not retried by every request
NO_NETWORK = "could not be downloaded (no network?)"

Fetch = Callable[[str, int, float], bytes]  # (url, max_bytes, timeout_s) -> body


class SourceError(Exception):
    """A source of a preset could not be used; the message says why, in one clause for people."""


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


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def copy_verified_clips(catalog: VoiceCatalog, source: Path, voices_dir: Path) -> list[str]:
    """Copy the catalog's preset clips found in `source` into `voices_dir` (made, even when empty),
    each only when its bytes match its pinned sha256; returns the file names copied."""
    voices_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for preset in catalog.presets:
        clip = preset.clip
        if clip is None or clip.file is None or not (source / clip.file).is_file():
            continue
        data = (source / clip.file).read_bytes()
        if sha256_hex(data) == clip.sha256:
            (voices_dir / clip.file).write_bytes(data)
            copied.append(clip.file)
    return copied


def _suffix_for(data: bytes) -> str:
    """File suffix from content: several upstream "*.wav" clips are really FLAC or MP3."""
    if data[:4] == b"fLaC":
        return ".flac"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return ".mp3"
    return ".ogg" if data[:4] == b"OggS" else ".wav"


def _keep(path: Path, data: bytes) -> None:
    """Save a verified download; a read-only cache only costs a later re-download."""
    try:
        write_atomic(path, lambda handle: handle.write(data))
    except OSError as exc:
        logger.warning("could not keep %s: %s", path, exc)


def _parse_manifest(data: bytes) -> dict[str, np.ndarray]:
    try:
        entries = json.loads(data)["builtin_voices"]
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("the ONNX manifest cannot be read: %s", exc)
        raise SourceError("needs the ONNX release's manifest, which cannot be read") from exc
    voices = {}
    for entry in entries if isinstance(entries, list) else []:
        try:
            voices[str(entry["voice"])] = check_codes(entry["prompt_audio_codes"], str(entry["voice"]))
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("skipping a manifest voice: %s", exc)
    return voices


class PresetSources:
    """Finds, verifies and (when `allow_download`) downloads with `fetch` the pinned `manifest` and the
    reference clips. Looks in `voices_dir` (clips under their catalog names, maybe the manifest) and
    `manifest_path`; keeps verified downloads in `downloads_dir`. Thread-safe."""

    def __init__(self, manifest: ManifestRef, *, voices_dir: Path | None, downloads_dir: Path,
                 allow_download: bool, fetch: Fetch, manifest_path: Path | None = None):
        self.manifest = manifest
        self.voices_dir = Path(voices_dir) if voices_dir is not None else None
        self.downloads_dir = Path(downloads_dir)
        self.allow_download = allow_download
        self._fetch = fetch
        self._manifest_path = manifest_path
        self._state_lock = threading.Lock()
        self._manifest_lock = threading.Lock()
        self._download_lock = threading.Lock()
        self._manifest_codes: dict[str, np.ndarray] | None = None
        self._file_sha: dict[tuple[str, int, int], str] = {}
        self._failed_downloads: dict[str, tuple[float, str]] = {}  # url -> (when, why), until a success
        self._network_problem: str | None = None  # the last download failed for want of a network

    # ---- clips ----------------------------------------------------------------------------------
    def local_clip(self, source: VoiceSource | None) -> Path | None:
        """The clip's local file (voices folder or downloads) whose sha256 matches, if any."""
        if source is None or source.sha256 is None or source.file is None:
            return None
        candidates = [self.voices_dir / source.file] if self.voices_dir is not None else []
        candidates += [self.downloads_dir / (source.sha256 + s) for s in (".wav", ".flac", ".mp3", ".ogg")]
        return next((p for p in candidates if p.is_file() and self._verified_sha(p) == source.sha256), None)

    def clip_problem(self, source: VoiceSource) -> str:
        """Why the clip is not usable from the voices folder, as what a preset "needs" (one clause)."""
        if self.voices_dir is None:
            return "needs its reference clip, but no voices folder is set (--voices-dir)"
        path = self.voices_dir / str(source.file)
        if not path.is_file():
            return f"needs its clip {source.file}, which is not in the voices folder"
        return f"needs its clip {source.file}, and the file in the voices folder is not the published one (sha256)"

    def download_problem(self, url: str) -> str | None:
        """Why a download of `url` would fail now, as far as is known (None: not known to fail): its
        last attempt failed, or the last download of any failed for want of a network."""
        with self._state_lock:
            failed = self._failed_downloads.get(url)
            return failed[1] if failed is not None else self._network_problem

    def clip_bytes(self, source: VoiceSource) -> bytes:
        """The clip's bytes from the voices folder, the download cache or its URL; sha256 verified."""
        assert source.sha256 is not None and source.url is not None
        path = self.local_clip(source)
        if path is not None:
            data = path.read_bytes()
            if sha256_hex(data) == source.sha256:  # re-checked on the bytes actually used
                return data
        if self.voices_dir is not None and (self.voices_dir / str(source.file)).is_file():
            logger.warning("%s does not match its pinned sha256 %s; not used", self.voices_dir / str(source.file),
                           source.sha256)  # a changed or corrupted local clip
        if not self.allow_download:
            raise SourceError(self.clip_problem(source))
        data = self._download(source.url, MAX_CLIP_DOWNLOAD_BYTES, source.sha256)
        _keep(self.downloads_dir / (source.sha256 + _suffix_for(data)), data)
        return data

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
            known = sha256_hex(path.read_bytes())
            with self._state_lock:
                self._file_sha[key] = known
        return known

    def _download(self, url: str, max_bytes: int, sha256: str) -> bytes:
        with self._state_lock:
            failed = self._failed_downloads.get(url)
        if failed is not None and time.monotonic() - failed[0] < DOWNLOAD_RETRY_S:
            raise SourceError(failed[1])
        logger.info("downloading %s", url)
        try:
            data = self._fetch(url, max_bytes, DOWNLOAD_TIMEOUT_S)
            if sha256_hex(data) != sha256:
                raise ValueError(f"sha256 mismatch (expected {sha256[:12]}…)")
        except (OSError, ValueError) as exc:  # URLError and TimeoutError are OSErrors
            network = isinstance(exc, OSError) and not isinstance(exc, urllib.error.HTTPError)
            why = NO_NETWORK if network else "could not be downloaded (its server sent something else)"
            logger.warning("download of %s failed: %s", url, exc)
            with self._state_lock:
                self._failed_downloads[url] = (time.monotonic(), why)
                if network:
                    self._network_problem = why
            raise SourceError(why) from exc
        with self._state_lock:  # the network works: what failed for want of one may work too
            self._failed_downloads = {u: f for u, f in self._failed_downloads.items() if f[1] != NO_NETWORK and u != url}
            self._network_problem = None
        return data

    # ---- manifest -------------------------------------------------------------------------------
    def manifest_codes(self, *, download: bool) -> dict[str, np.ndarray]:
        """voice name -> codes of the pinned manifest; raises SourceError when it cannot be had."""
        ref = self.manifest
        with self._manifest_lock:  # held only for local files, never during a download
            if self._manifest_codes is None:
                data = self._local_manifest_bytes()
                if data is not None:
                    self._manifest_codes = _parse_manifest(data)
            if self._manifest_codes is not None:
                return self._manifest_codes
        if not download:
            raise SourceError(f"needs the ONNX release's {ref.file}, which is not in the voices folder")
        with self._download_lock:  # one download at a time; never taken while holding _manifest_lock
            with self._manifest_lock:
                if self._manifest_codes is not None:
                    return self._manifest_codes
            data = self._download(ref.url, ref.size, ref.sha256)
            _keep(self.downloads_dir / f"{ref.sha256}.json", data)
            parsed = _parse_manifest(data)
            with self._manifest_lock:
                self._manifest_codes = parsed
            return parsed

    def _local_manifest_bytes(self) -> bytes | None:
        ref = self.manifest
        candidates = (self._manifest_path, self.voices_dir / ref.file if self.voices_dir else None,
                      self.downloads_dir / f"{ref.sha256}.json")
        for path in candidates:
            if path is None or not path.is_file() or path.stat().st_size != ref.size:
                continue
            data = path.read_bytes()
            if sha256_hex(data) == ref.sha256:
                return data
            logger.warning("%s does not match the pinned manifest sha256; not used", path)
        return None
