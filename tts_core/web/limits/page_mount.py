"""Mounts the Gradio page on the FastAPI app the way Gradio's own `launch()` would have set it up.

`gr.mount_gradio_app` leaves `Blocks.has_launched` False, and Gradio's file guard
(`processing_utils._check_allowed`) does nothing until it is True: any server path a client named
in a file input was then hashed and copied into the cache (/dev/zero: forever, on the event loop).
`launch()` sets it when the server starts, and Gradio's reloader sets it on the blocks it swaps into
a running server; the lifespan here does the same once the server is up. Besides:

- `blocked_paths`: the repository, the checkpoints, the voice cache and the system folders, so
  that not even a bug elsewhere lets Gradio serve them (the upload folder itself stays allowed);
- `allowed_paths` stays empty: the page serves no files of its own through Gradio;
- `show_error=False`: Gradio's own error texts (which quote values and object reprs) never reach
  the page; our handlers write their own messages;
- `delete_cache`: Gradio deletes what it cached after an hour (and everything at shutdown);
  `UploadDiskBound` keeps the folder within a size and a file count meanwhile;
- `GradioFileGuard` (gradio_files.py) in front: path-free upload handles, no URLs, no paths.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from fastapi import FastAPI

from ...env import env_str
from .gradio_files import GradioFileGuard, UploadPaths
from .upload_disk import UploadDiskBound

REPO_ROOT = Path(__file__).resolve().parents[3]
_SYSTEM_DIRS = ("/etc", "/proc", "/sys", "/dev", "/root", "/boot", "/var", "/usr", "/home")


@dataclass(frozen=True, slots=True)
class PageFiles:
    """Bounds of Gradio's upload folder.

    Args:
        max_bytes / max_files: the folder's files are kept within both (least recently used go first).
        max_age_s: Gradio's `delete_cache` deletes cached files older than this, checked every
            `max_age_s / 4` seconds.
    """

    max_bytes: int = 256 * 1024 * 1024
    max_files: int = 512
    max_age_s: int = 3600


def upload_folder() -> Path:
    """Gradio's upload (and cache) folder: GRADIO_TEMP_DIR, else <temp dir>/gradio."""
    return Path(os.path.realpath(env_str("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio"))


def blocked_paths(private: list[str | os.PathLike], folder: Path) -> list[str]:
    """Folders Gradio must never serve or copy from, minus any that hold its own upload folder."""
    candidates = [REPO_ROOT, *private, *_SYSTEM_DIRS, Path.home()]
    out = []
    for path in candidates:
        real = Path(os.path.realpath(path))
        if str(real) != "/" and not folder.is_relative_to(real) and str(real) not in out:
            out.append(str(real))
    return out


def upload_disk_bound(files: PageFiles = PageFiles()) -> UploadDiskBound:
    return UploadDiskBound(upload_folder(), max_bytes=files.max_bytes, max_files=files.max_files)


def mount_page(app: FastAPI, demo: gr.Blocks, *, disk: UploadDiskBound, private_paths: list[str | os.PathLike],
               max_file_size: int, max_age_s: int = PageFiles.max_age_s, **mount_kwargs) -> None:
    """Mount `demo` at "/" with the guards above (`disk` bounds Gradio's upload folder)."""
    folder = disk.folder
    demo.delete_cache = (max(1, max_age_s // 4), max_age_s)  # read when the Gradio app is created
    app.add_middleware(GradioFileGuard, paths=UploadPaths(folder), disk=disk)
    app.state.page = demo
    gr.mount_gradio_app(app, demo, path="/", allowed_paths=[], blocked_paths=blocked_paths(private_paths, folder),
                        show_error=False, max_file_size=max_file_size, **mount_kwargs)
    page_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def launched(app_: FastAPI):
        async with page_lifespan(app_) as state:
            demo.has_launched = True  # as launch() does: from now on Gradio checks every file input
            yield state

    app.router.lifespan_context = launched
