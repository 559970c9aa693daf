"""The in-browser engine beside the server's: a static `export-web` build served at /browser.

Its documents are sent with the cross-origin isolation headers the build's Space front matter
names (COOP/COEP/CORP), so the page opened at /browser/ gets wasm threads; the Gradio page only
links to it (an isolated page cannot live in the non-isolated studio's iframe and keep threads).
"""

from __future__ import annotations

from pathlib import Path

from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

from tts_core.export.web import CROSS_ORIGIN_HEADERS

MOUNT_PATH = "/browser"


def check_build(directory: str | Path) -> Path:
    """The build folder, or ValueError naming the flag and the fix."""
    path = Path(directory)
    if not (path / "manifest.json").is_file() or not (path / "index.html").is_file():
        raise ValueError(f"--browser-build {directory}: no export-web build there (index.html and manifest.json); "
                         "make one with python -m tts_core export-web")
    return path


class IsolatedStaticFiles(StaticFiles):
    """StaticFiles whose every response carries the cross-origin isolation headers."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_isolated(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in CROSS_ORIGIN_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, send_isolated)


def engine_choice_html() -> str:
    """The page's engine choice: this server, or the same studio running in the visitor's tab."""
    return (f'<nav id="engine-choice" aria-label="Engine">Engine: <strong aria-current="page">Server</strong> · '
            f'<a href="{MOUNT_PATH.lstrip("/")}/" target="_blank" rel="noopener">This browser</a> '
            '<span class="engine-note">(the model runs in your tab: no server, no GPU quota)</span></nav>')
