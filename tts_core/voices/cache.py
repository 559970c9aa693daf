"""The on-disk cache of encoded voices: one `<key>.npy` of prompt codes [T, 16] per key.

One folder per codec fingerprint, so codes of another codec are never reused. Keys are sha256 hex
digests, so no path is built from user input. A failure to read or write only costs a re-encode:
the cache never fails a request. Bounded by `max_files` and `max_bytes`: after each `put` the least
recently used entries go (a hit touches its file), and stale temporary files are removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .catalog import HEX64, check_codes

logger = logging.getLogger(__name__)

DEFAULT_MAX_FILES = 4096  # 20 s of codes is 32 KB, so about 128 MiB at most
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
STALE_TEMP_S = 3600.0  # a temporary file this old belongs to a write that never finished


def write_atomic(path: Path, write: Callable[[Any], None]) -> None:
    """Write a file through a temporary sibling and a rename, so readers never see half a file."""
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


class CodeCache:
    """Prompt codes by key in `directory` (one codec's folder, created on the first `put`), within
    `max_files` / `max_bytes` (None = unbounded, for codes that must never be evicted). Safe to share
    between threads (atomic files; one lock around eviction)."""

    def __init__(self, directory: Path, *, max_files: int | None = DEFAULT_MAX_FILES,
                 max_bytes: int | None = DEFAULT_MAX_BYTES):
        if (max_files is not None and max_files < 1) or (max_bytes is not None and max_bytes < 1):
            raise ValueError("max_files and max_bytes must be positive (or None for no bound)")
        self.directory = Path(directory)
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.evicted = 0
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        if not HEX64.fullmatch(key):  # keys are hex digests only: no path can be built from input
            raise ValueError(f"bad cache key {key!r}")
        return self.directory / f"{key}.npy"

    def __contains__(self, key: str) -> bool:
        return self._path(key).is_file()

    def get(self, key: str) -> np.ndarray | None:
        """The codes stored under `key` (read-only int64 [T, 16]), or None; a bad file is removed."""
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            codes = check_codes(np.load(path, allow_pickle=False), str(path))
        except (OSError, ValueError, EOFError) as exc:
            logger.warning("ignoring unreadable cached codes %s: %s", path, exc)
            path.unlink(missing_ok=True)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the least recently used entries are evicted first
        return codes

    def put(self, key: str, codes: np.ndarray) -> None:
        """Store codes under `key`, then keep the folder within its bounds; a read-only or full disk
        is logged, not raised."""
        path = self._path(key)
        try:
            write_atomic(path, lambda handle: np.save(handle, codes, allow_pickle=False))
        except OSError as exc:
            logger.warning("could not cache voice codes in %s: %s", self.directory, exc)
            return
        self.enforce_bounds(keep=path)

    def enforce_bounds(self, keep: Path | None = None) -> int:
        """Delete the least recently used entries (never `keep`) until the bounds hold, and stale
        temporary files; returns how many entries were deleted."""
        if self.max_files is None and self.max_bytes is None:
            return 0
        with self._lock:
            entries, now = [], time.time()
            try:
                scan = list(os.scandir(self.directory))
            except OSError:
                return 0
            for entry in scan:
                try:
                    stat = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.name.startswith(".tmp-"):
                    if now - stat.st_mtime > STALE_TEMP_S:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
                elif entry.name.endswith(".npy") and entry.is_file(follow_symlinks=False):
                    entries.append((stat.st_mtime, stat.st_size, entry.path))
            entries.sort()
            count, total, deleted = len(entries), sum(size for _, size, _ in entries), 0
            for _, size, entry_path in entries:
                if (self.max_files is None or count <= self.max_files) and (
                        self.max_bytes is None or total <= self.max_bytes):
                    break
                if keep is not None and entry_path == str(keep):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry_path)
                count, total, deleted = count - 1, total - size, deleted + 1
            self.evicted += deleted
        if deleted:
            logger.info("voice code cache over its bound: deleted the %d least recently used entries", deleted)
        return deleted
