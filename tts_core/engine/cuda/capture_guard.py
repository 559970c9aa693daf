"""Python's cyclic garbage collector kept out of CUDA graph capture.

torch no longer collects garbage when a capture begins (`torch.compiler.config.force_cudagraph_gc`
is off by default), so a collection can start in the middle of a capture, triggered by whatever
the captured body allocates. If the garbage holds a CUDA graph (a dropped runner in a reference
cycle), destroying it is an operation CUDA forbids while the thread is capturing: the capture is
invalidated and fails ("operation failed due to a previous error during capture"), e.g. when a
runner is built in a process that has dropped graphed runners before.

So: collect once before the captures, and keep the collector off until they are done. The
collector is process-wide; it is off for the seconds a capture takes, and back on afterwards
unless it was already off.
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
