"""The page at "/": a placeholder until the Gradio page is built, then the page itself.

The API serves first; the Gradio page (seconds of work under the interpreter lock) is built in a
thread once the model has settled and no stream is in progress (`PageMode.DEFERRED`). Until then
"/" answers `static/gradio/starting.html` and Gradio's other paths 503 + Retry-After; the API
routes never wait for the page. `PageMode.NOW` builds it before serving (tests, ZeroGPU mode);
`--no-ui` serves none (`PageMode.OFF`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from starlette.responses import HTMLResponse, JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_body

logger = logging.getLogger(__name__)

STARTING_PAGE = Path(__file__).resolve().parents[1] / "static" / "gradio" / "starting.html"
RETRY_AFTER_S = 2
# Importing Gradio parses sources with `ast`, whose recursion count CPython 3.11 keeps per
# interpreter: a thread parsing meanwhile fails one of the two with "SystemError: AST constructor
# recursion depth mismatch" (cpython#106905), so a build that met it is run again.
BUILD_ATTEMPTS = 3


class PageMode(str, Enum):
    NOW = "now"  # built before serving
    DEFERRED = "deferred"  # built once the model has settled and no stream is in progress
    OFF = "off"  # no page: the API alone


@dataclass(frozen=True, slots=True)
class PageApp:
    """A built page: the ASGI app served at "/", its Blocks, and its start-up (entered on the
    server's event loop; left at shutdown)."""

    app: ASGIApp
    blocks: Any
    lifespan: Callable[[], AbstractAsyncContextManager[None]]


class PageSlot:
    """ASGI app mounted at "/", last (Gradio's catch-all shadows any route after it): forwards to
    the page once it serves, else answers for it."""

    def __init__(self, mode: PageMode):
        self.mode = mode
        self.target: ASGIApp | None = None
        self.failed = False

    @property
    def state(self) -> str:
        """For /health: "served", "building", "failed" or "off"."""
        if self.mode is PageMode.OFF:
            return "off"
        return "served" if self.target is not None else "failed" if self.failed else "building"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.target is not None:
            await self.target(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1013})  # "try again later"
            return
        if scope["type"] != "http":
            return
        await self._placeholder(scope)(scope, receive, send)

    def _placeholder(self, scope: Scope):
        if self.mode is PageMode.OFF:
            body = error_body("this server runs the API alone (--no-ui): see /docs", error_type="not_found_error",
                              code="page_disabled")
            return JSONResponse(body, status_code=404)
        if self.failed:
            body = error_body("the page could not be built (the server log says why); the API still answers: "
                              "see /docs", error_type="server_error", code="page_failed")
            return JSONResponse(body, status_code=503)
        headers = {"Retry-After": str(RETRY_AFTER_S), "Cache-Control": "no-store"}
        if scope.get("method") in ("GET", "HEAD") and scope.get("path", "/") in ("", "/"):
            return HTMLResponse(STARTING_PAGE.read_text(encoding="utf-8"), status_code=503, headers=headers)
        body = error_body("the page is still being built; the API already answers", error_type="server_error",
                          code="page_starting")
        return JSONResponse(body, status_code=503, headers=headers)


class PageRunner:
    """Builds the page now or later and runs its start-up and shut-down on the server's event loop:
    `build` makes it (imports Gradio; None with `PageMode.OFF`), after `wait_turn` blocks until it
    may (`PageMode.DEFERRED`), and `slot` serves it once started."""

    def __init__(self, slot: PageSlot, build: Callable[[], PageApp] | None, *,
                 wait_turn: Callable[[], None] | None = None):
        self.slot = slot
        self._build = build
        self._wait_turn = wait_turn
        self._built: PageApp | None = None
        self.served = threading.Event()  # set once the page answers at "/"

    def build_now(self) -> PageApp:
        assert self._build is not None, "no page to build (PageMode.OFF)"
        self._built = self._build()
        return self._built

    @asynccontextmanager
    async def running(self):
        """The server's lifespan holds this: a page built before serving starts before the server
        answers; a deferred one is built in a thread and starts when ready."""
        if self._built is not None:
            async with self._serve(self._built):
                yield
            return
        if self.slot.mode is not PageMode.DEFERRED or self._build is None:
            yield
            return
        loop = asyncio.get_running_loop()
        built: asyncio.Future[PageApp] = loop.create_future()
        threading.Thread(target=self._build_later, args=(loop, built), name="page-build", daemon=True).start()
        stop = asyncio.Event()
        task = asyncio.create_task(self._serve_when_built(built, stop))
        try:
            yield
        finally:
            stop.set()
            await task

    def _build_later(self, loop: asyncio.AbstractEventLoop, built: asyncio.Future) -> None:
        """(Thread.) Wait for the page's turn, build it, hand it to the event loop."""
        assert self._build is not None and self._wait_turn is not None
        try:
            self._wait_turn()
            logger.info("building the page (the API already answers)")
            page = self._build_retrying()
        except Exception as exc:  # the API keeps serving; "/" says the page failed
            logger.exception("the page could not be built")
            self._hand_over(loop, built, functools.partial(built.set_exception, exc))
        else:
            self._hand_over(loop, built, functools.partial(built.set_result, page))

    def _build_retrying(self) -> PageApp:
        assert self._build is not None
        for attempt in range(1, BUILD_ATTEMPTS + 1):
            try:
                return self._build()
            except SystemError as exc:
                if attempt == BUILD_ATTEMPTS or "recursion depth mismatch" not in str(exc):
                    raise
                logger.warning("building the page met CPython's AST race (%s); building it again", exc)
        raise AssertionError("unreachable")

    @staticmethod
    def _hand_over(loop: asyncio.AbstractEventLoop, built: asyncio.Future, settle: Callable[[], None]) -> None:
        def on_loop() -> None:
            if not built.done():  # (cancelled when the server stopped first)
                settle()

        with contextlib.suppress(RuntimeError):  # the event loop is closed: the server stopped meanwhile
            loop.call_soon_threadsafe(on_loop)

    async def _serve_when_built(self, built: asyncio.Future, stop: asyncio.Event) -> None:
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({built, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not built.done():
            built.cancel()
            return
        stopped.cancel()
        if built.exception() is not None:
            self.slot.failed = True
            return
        async with self._serve(built.result()):
            await stop.wait()

    @asynccontextmanager
    async def _serve(self, page: PageApp):
        async with page.lifespan():
            self.slot.target = page.app
            self.served.set()
            logger.info("the page is served at /")
            yield
