"""A disk bound for Gradio's upload folder: at most `max_files` files and `max_bytes` bytes, LRU.

Gradio keeps every upload (and every converted copy) in content-addressed folders
`<upload folder>/<sha256>/<name>` until the server stops or `delete_cache` ages them out. Here,
after every upload and every page event, the oldest files are deleted until both bounds hold
again. "Oldest" is the last time the file was uploaded or named by an event (`touch`), else its
modification time. Other content of the folder (Gradio's own subfolders) is left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

logger = logging.getLogger(__name__)

_CONTENT_DIR = re.compile(r"^[0-9a-f]{16,128}$")


@dataclass(frozen=True, slots=True)
class DiskUsage:
    files: int
    bytes: int
    evicted_files: int  # by this sweep


class UploadDiskBound:
    """Bounds the files of Gradio's upload folder (see the module docstring). Thread-safe."""

    def __init__(self, folder: str | os.PathLike, *, max_bytes: int, max_files: int):
        if max_bytes < 1 or max_files < 1:
            raise ValueError("max_bytes and max_files must be positive")
        self.folder = Path(os.path.realpath(folder))
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.evicted_total = 0
        self.last = DiskUsage(0, 0, 0)
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()
        self._sweeping = False
        self._again = False

    def touch(self, path: str | os.PathLike) -> None:
        """Mark a file as just used (uploaded, or named by an event)."""
        self._used[os.path.realpath(path)] = time.time()

    def _files(self) -> list[tuple[float, int, str]]:
        found = []
        try:
            top = list(os.scandir(self.folder))
        except OSError:
            return []
        for entry in top:
            if not (_CONTENT_DIR.match(entry.name) and entry.is_dir(follow_symlinks=False)):
                continue
            try:
                for item in os.scandir(entry.path):
                    if item.is_file(follow_symlinks=False):
                        stat = item.stat(follow_symlinks=False)
                        used = max(stat.st_mtime, self._used.get(item.path, 0.0))
                        found.append((used, stat.st_size, item.path))
            except OSError:
                continue
        return found

    def sweep(self) -> DiskUsage:
        """Delete the least recently used files until both bounds hold; returns what is left."""
        with self._lock:
            files = sorted(self._files())
            total = sum(size for _, size, _ in files)
            count, evicted = len(files), 0
            for _, size, path in files:
                if count <= self.max_files and total <= self.max_bytes:
                    break
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    logger.warning("could not delete an old upload: %s", exc.strerror or exc)
                    continue
                count, total, evicted = count - 1, total - size, evicted + 1
                self._used.pop(path, None)
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.dirname(path))  # only when empty
            if len(self._used) > 4 * self.max_files:  # forget files deleted by others (delete_cache)
                self._used = {p: t for p, t in self._used.items() if os.path.exists(p)}
            self.evicted_total += evicted
            self.last = DiskUsage(count, total, evicted)
        if evicted:
            logger.info("upload folder over its bound: deleted the %d least recently used files "
                        "(%d files, %.1f MiB left)", evicted, count, total / 2**20)
        return self.last

    async def sweep_soon(self) -> None:
        """Sweep in a worker thread; concurrent callers fold into one more sweep after the current one."""
        if self._sweeping:
            self._again = True
            return
        self._sweeping = True
        try:
            while True:
                self._again = False
                await anyio.to_thread.run_sync(self.sweep)
                if not self._again:
                    return
        finally:
            self._sweeping = False
