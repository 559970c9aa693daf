"""Builds the Gradio page's ASGI app the way Gradio's own `launch()` would have set it up.

`build_page_app` mounts the page on a holder app (the live server is never changed while it
serves) and returns it with its start-up, which sets `Blocks.has_launched` so Gradio's file guard
checks every file input; `blocked_paths`, an empty `allowed_paths`, `show_error=False`,
`delete_cache` and `GradioFileGuard` in front (docs/RELIABILITY.md, "Security"). Gradio is imported
only here, on first use, so the API's start-up never waits for it.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from tts_core.env import env_str

from ..page_slot import PageApp
from .gradio_files import GradioFileGuard, UploadPaths
from .upload_disk import UploadDiskBound

if TYPE_CHECKING:
    import gradio as gr

REPO_ROOT = Path(__file__).resolve().parents[2]
_SYSTEM_DIRS = ("/etc", "/proc", "/sys", "/dev", "/root", "/boot", "/var", "/usr", "/home")


# Bounds of Gradio's upload folder: its files are kept within both (least recently used go first),
# and Gradio's `delete_cache` deletes cached files older than PAGE_FILES_MAX_AGE_S (checked every quarter of it).
PAGE_FILES_MAX_BYTES = 256 * 1024 * 1024
PAGE_FILES_MAX_FILES = 512
PAGE_FILES_MAX_AGE_S = 3600


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


def upload_disk_bound() -> UploadDiskBound:
    return UploadDiskBound(upload_folder(), max_bytes=PAGE_FILES_MAX_BYTES, max_files=PAGE_FILES_MAX_FILES)


def install_file_guard(app: FastAPI, disk: UploadDiskBound) -> None:
    """The Gradio file guard, innermost of the app's middlewares (gradio_files.py). Installed when
    the app is created: middlewares cannot be added once the server runs, the page may come later."""
    app.add_middleware(GradioFileGuard, paths=UploadPaths(disk.folder), disk=disk)


def build_page_app(server: FastAPI, demo: gr.Blocks, *, disk: UploadDiskBound,
                   private_paths: list[str | os.PathLike], max_file_size: int, **mount_kwargs: Any) -> PageApp:
    """`demo` as an ASGI app for "/" of `server`, with the guards above, and its start-up."""
    import gradio as gr

    folder = disk.folder
    demo.delete_cache = (PAGE_FILES_MAX_AGE_S // 4, PAGE_FILES_MAX_AGE_S)  # read when the Gradio app is created
    holder = FastAPI()
    # Gradio adds its own CORS answers unless the app it is mounted in configures CORS; the server
    # does (guards.py), so the holder shows Gradio the server's middleware list.
    holder.user_middleware = server.user_middleware
    gr.mount_gradio_app(holder, demo, path="/", allowed_paths=[],
                        blocked_paths=blocked_paths(private_paths, folder), show_error=False,
                        max_file_size=max_file_size, **mount_kwargs)
    page = holder.routes[-1].app  # the Gradio app mount_gradio_app mounted at "/"

    @asynccontextmanager
    async def lifespan():
        # What mount_gradio_app puts in the holder's lifespan, then what launch() does once serving.
        async with page.router.lifespan_context(page):
            page.get_blocks().run_startup_events()
            await page.get_blocks().run_extra_startup_events()
            demo.has_launched = True  # from now on Gradio checks every file input
            yield

    return PageApp(app=page, blocks=demo, lifespan=lifespan)
