"""Starting a synthesis stream from an HTTP route, cancellable while it waits.

A request may sit in the engine's queue before its first chunk; `next()` on the stream then
blocks in a worker thread where the route cannot interrupt it. The stream is given a cancel
event, and a watcher sets it as soon as the client disconnects, so a client that gives up while
queued frees its place at once instead of when its turn comes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anyio
from starlette.requests import Request

from .types import AudioChunk, SynthesisRequest

_POLL_S = 0.1


async def open_stream(synth, request: SynthesisRequest,
                      http_request: Request | None) -> tuple[Iterator[AudioChunk], AudioChunk | None]:
    """Start `request` and wait for its first chunk (errors surface here, before any byte is sent).

    Returns the chunk iterator and the first chunk (None when the client left before it came).
    """
    cancel = threading.Event()
    gen = synth.stream(request, cancel=cancel)
    outcome: dict = {}

    async def watch() -> None:
        while not cancel.is_set():
            if http_request is not None and await http_request.is_disconnected():
                cancel.set()
                return
            await anyio.sleep(_POLL_S)

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            outcome["first"] = await anyio.to_thread.run_sync(next, gen, None)
        except BaseException as exc:  # re-raised below, outside the task group (no ExceptionGroup)
            outcome["error"] = exc
        finally:
            group.cancel_scope.cancel()
    if "error" in outcome:
        gen.close()
        raise outcome["error"]
    return gen, outcome["first"]
