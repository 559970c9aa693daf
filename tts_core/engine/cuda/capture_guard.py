"""Python's cyclic garbage collector kept out of CUDA graph capture.

A collection mid-capture that destroys a dead CUDA graph (a dropped runner in a reference cycle)
fails the capture ("operation failed due to a previous error during capture"), and torch does not
collect before one by default (`force_cudagraph_gc`). So: collect once before the captures and keep
the process-wide collector off until they are done (back on after, unless it was off already).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_gc_during_capture() -> Iterator[None]:
    gc.collect()  # dead graphs are destroyed now, outside any capture
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
