"""Saved voices: a clip a user named once, kept on disk with its encoded prompt codes.

One folder per voice, `voice_<24 hex>/` (voice.json, sample.bin as sent, codes-<codec>.npy), written
in a hidden folder and renamed into place, so a voice appears whole or not at all; ids are checked
against their pattern before any path is built. Processes sharing the folder (replicas) save and
delete under an exclusive `flock` on `library.lock`, so the count check and the rename are one step;
readers need no lock (docs/SERVING.md, "Replicas").
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import InvalidRequestError, PayloadTooLargeError, TTSError, VoiceNotFoundError
from .cache import write_atomic
from .catalog import LANGUAGES, check_codes

logger = logging.getLogger(__name__)

VOICE_ID = re.compile(r"voice_[0-9a-f]{24}")
_FINGERPRINT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_NAME_CHARS = 64
_NAME_PUNCTUATION = frozenset(" -_.,'()&+")
_META = "voice.json"
_SAMPLE = "sample.bin"

_LOCK_FILE = "library.lock"  # not hidden: hidden entries are staging or trash


@contextlib.contextmanager
def folder_lock(directory: Path) -> Iterator[None]:
    """Exclusive across processes and threads: `flock` on a file opened for this call alone (locks
    belong to open file descriptions, so two opens in one process exclude each other too)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def is_voice_id(value: object) -> bool:
    return isinstance(value, str) and VOICE_ID.fullmatch(value) is not None


def sanitize_name(raw: object, param: str = "name") -> str:
    """A display name: letters, digits, spaces and a little punctuation, at most 64 characters."""
    if not isinstance(raw, str):
        raise InvalidRequestError(f"{param} must be a string", param=param)
    text = unicodedata.normalize("NFKC", raw)
    kept = "".join(ch if ch.isalnum() or ch in _NAME_PUNCTUATION else " " for ch in text)
    name = " ".join(kept.split())[:MAX_NAME_CHARS].strip()
    if not any(ch.isalnum() for ch in name):
        raise InvalidRequestError(f"{param} needs at least one letter or digit (e.g. 'Narrator')",
                                  param=param, code="invalid_name")
    return name


@dataclass(frozen=True, slots=True)
class SavedVoice:
    id: str
    name: str
    created_at: int  # Unix seconds
    transcript: str | None
    language: str | None
    sample_bytes: int
    sample_seconds: float
    consent: str | None = None  # what the client sent as consent (not verified here)
    created_ns: int = 0  # orders voices saved within one second


def _parse_meta(data: object, voice_id: str) -> SavedVoice:
    if not isinstance(data, dict) or data.get("id") != voice_id:
        raise ValueError("voice.json does not describe this voice")
    voice = SavedVoice(**{name: data.get(name) for name in SavedVoice.__dataclass_fields__})
    if not isinstance(voice.name, str) or not isinstance(voice.created_at, int):
        raise ValueError("voice.json lacks a name or created_at")
    return voice


class VoiceLibrary:
    """Saved voices in `directory` (created on the first save). Safe across threads and processes
    sharing the folder. Saving past `max_voices` is refused until one is deleted; clips over
    `max_sample_bytes` are refused (413)."""

    def __init__(self, directory: Path, *, max_voices: int = 64, max_sample_bytes: int = 10 * 2**20):
        if max_voices < 1 or max_sample_bytes < 1:
            raise ValueError("max_voices and max_sample_bytes must be positive")
        self.directory = Path(directory)
        self.max_voices = int(max_voices)
        self.max_sample_bytes = int(max_sample_bytes)

    def _folder(self, voice_id: str) -> Path:
        if not is_voice_id(voice_id):
            raise VoiceNotFoundError(
                f"no saved voice {str(voice_id)[:40]!r}: saved voice ids look like voice_<24 hex digits> "
                "(GET /v1/audio/voices lists them)", param="voice_id", code="voice_not_found")
        return self.directory / voice_id

    # ---- reading --------------------------------------------------------------------------------

    def list(self) -> list[SavedVoice]:
        """Every saved voice, oldest first; a damaged entry is logged and skipped."""
        if not self.directory.is_dir():
            return []
        voices = []
        for entry in self.directory.iterdir():
            if is_voice_id(entry.name):
                try:
                    voices.append(self._read(entry.name))
                except FileNotFoundError:  # deleted (renamed away) since the folder was read
                    continue
                except (OSError, ValueError, TypeError) as exc:
                    logger.warning("skipping damaged saved voice %s: %s", entry.name, exc)
        return sorted(voices, key=lambda v: (v.created_at, v.created_ns or 0, v.id))

    def _read(self, voice_id: str) -> SavedVoice:
        path = self._folder(voice_id) / _META
        return _parse_meta(json.loads(path.read_text(encoding="utf-8")), voice_id)

    def get(self, voice_id: str) -> SavedVoice:
        try:
            return self._read(voice_id)
        except (OSError, ValueError, TypeError):
            raise VoiceNotFoundError(
                f"no saved voice {voice_id!r} (deleted, or never saved here): GET /v1/audio/voices lists them",
                param="voice_id", code="voice_not_found") from None

    def sample(self, voice_id: str) -> bytes:
        self.get(voice_id)
        return (self._folder(voice_id) / _SAMPLE).read_bytes()

    def codes(self, voice_id: str, fingerprint: str,
              encode: Callable[[bytes, str | None], np.ndarray] | None = None) -> np.ndarray:
        """The voice's prompt codes for the codec `fingerprint`; made from the saved clip by
        `encode(sample, transcript)` (and kept) when this codec has not encoded it yet."""
        if not _FINGERPRINT.fullmatch(fingerprint):
            raise ValueError(f"bad codec fingerprint {fingerprint!r}")
        voice = self.get(voice_id)
        path = self._folder(voice_id) / f"codes-{fingerprint}.npy"
        try:
            return check_codes(np.load(path, allow_pickle=False), "saved voice codes")
        except (OSError, ValueError, EOFError) as exc:
            if encode is None:
                raise VoiceNotFoundError(f"saved voice {voice_id!r} has no codes for this model",
                                         param="voice", code="voice_not_found") from exc
        codes = check_codes(encode(self.sample(voice_id), voice.transcript), "saved voice codes")
        try:
            write_atomic(path, lambda handle: np.save(handle, codes, allow_pickle=False))
        except OSError as exc:  # a read-only disk costs a re-encode next time, nothing more
            logger.warning("could not keep re-encoded codes of %s: %s", voice_id, exc)
        return codes

    # ---- writing --------------------------------------------------------------------------------

    def add(self, *, name: str, sample: bytes, codes: np.ndarray, fingerprint: str, sample_seconds: float,
            transcript: str | None = None, language: str | None = None, consent: str | None = None) -> SavedVoice:
        """Save a voice; refused (400) when the library is full, 413 when the clip is too large."""
        name = sanitize_name(name)
        if len(sample) > self.max_sample_bytes:
            raise PayloadTooLargeError(
                f"audio_sample is {len(sample) / 2**20:.1f} MiB; the limit is {self.max_sample_bytes / 2**20:.1f} "
                "MiB: send a 3-30 s clip", param="audio_sample", code="audio_too_large")
        if language is not None and language not in LANGUAGES:
            raise InvalidRequestError(f"language must be one of {', '.join(LANGUAGES)} or omitted",
                                      param="language")
        if not _FINGERPRINT.fullmatch(fingerprint):
            raise ValueError(f"bad codec fingerprint {fingerprint!r}")
        codes = check_codes(codes, "voice codes")
        now_ns = time.time_ns()
        voice = SavedVoice(id=f"voice_{secrets.token_hex(12)}", name=name, created_at=now_ns // 10**9,
                           transcript=(transcript or "").strip() or None, language=language,
                           sample_bytes=len(sample), sample_seconds=round(float(sample_seconds), 3),
                           consent=(consent or "").strip()[:200] or None, created_ns=now_ns)
        try:
            with folder_lock(self.directory):  # the count check and the rename: one step for every process
                self._store(voice, sample, codes, fingerprint)
        except OSError as exc:  # a full or read-only disk: say so, without the server's paths
            logger.error("could not save voice %r in %s: %s", name, self.directory, exc)
            raise TTSError("the server could not store the voice (its cache dir is full or read-only)",
                           code="storage_error") from None
        logger.info("saved voice %s (%r, %.1f s)", voice.id, voice.name, voice.sample_seconds)
        return voice

    def _store(self, voice: SavedVoice, sample: bytes, codes: np.ndarray, fingerprint: str) -> None:
        """Write `voice` in a hidden folder and rename it into place (under the folder lock)."""
        count = len(self.list())
        if count >= self.max_voices:
            raise InvalidRequestError(
                f"the voice library is full ({count} of {self.max_voices}): delete one "
                "(DELETE /v1/audio/voices/{id}) before saving another", param=None, code="voice_limit_reached")
        staging = self.directory / f".tmp-{voice.id}"
        try:
            self._sweep()
            staging.mkdir()
            write_atomic(staging / _SAMPLE, lambda handle: handle.write(sample))
            write_atomic(staging / f"codes-{fingerprint}.npy", lambda handle: np.save(handle, codes, allow_pickle=False))
            write_atomic(staging / _META, lambda handle: handle.write(
                json.dumps(asdict(voice), ensure_ascii=False, indent=1).encode("utf-8")))
            os.replace(staging, self.directory / voice.id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _sweep(self) -> None:
        """Remove what an interrupted save or delete left behind (hidden folders, an hour old: another
        process sharing the folder may be saving right now)."""
        for entry in self.directory.iterdir():
            if entry.name.startswith((".tmp-voice_", ".trash-voice_")) and entry.is_dir():
                with contextlib.suppress(OSError):
                    if time.time() - entry.stat().st_mtime > 3600:
                        shutil.rmtree(entry, ignore_errors=True)

    def delete(self, voice_id: str) -> SavedVoice:
        """Remove a voice (its folder goes away at once); returns what it was."""
        with folder_lock(self.directory):
            voice = self.get(voice_id)
            trash = self.directory / f".trash-{voice_id}-{secrets.token_hex(4)}"
            os.replace(self._folder(voice_id), trash)
        shutil.rmtree(trash, ignore_errors=True)
        logger.info("deleted saved voice %s (%r)", voice.id, voice.name)
        return voice
