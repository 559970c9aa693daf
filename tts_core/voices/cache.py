"""The on-disk cache of encoded voices: one `<key>.npy` of prompt codes [T, 16] per key.

A cache lives in one folder per codec (the folder name is the codec fingerprint), so codes of
another codec are never reused. Keys are sha256 hex digests (of a clip's bytes or of decoded
upload audio), so no path can be built from user input. Every failure to read or write only
costs a re-encode: the cache never fails a request.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .catalog import HEX64, check_codes

logger = logging.getLogger(__name__)


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
    """Prompt codes by key in `directory`. Safe to share between threads (atomic files only).

    Nothing is evicted yet: every key stays until its file is removed by hand.

    Args:
        directory: the folder of one codec, created on the first `put`.
    """

    def __init__(self, directory: Path):
        self.directory = Path(directory)

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
            return check_codes(np.load(path, allow_pickle=False), str(path))
        except (OSError, ValueError, EOFError) as exc:
            logger.warning("ignoring unreadable cached codes %s: %s", path, exc)
            path.unlink(missing_ok=True)
            return None

    def put(self, key: str, codes: np.ndarray) -> None:
        """Store codes under `key`; a read-only or full disk is logged, not raised."""
        path = self._path(key)
        try:
            write_atomic(path, lambda handle: np.save(handle, codes, allow_pickle=False))
        except OSError as exc:
            logger.warning("could not cache voice codes in %s: %s", self.directory, exc)
