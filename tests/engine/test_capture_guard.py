"""The guard that keeps Python's garbage collector out of CUDA graph capture (a collection that
destroys a dead graph mid-capture invalidates the capture). The capture itself is GPU-only:
tests/gpu/test_gpu_engine.py builds a graphed runner with dead graphed runners in reference cycles and
the collector set to run on almost every allocation."""

from __future__ import annotations

import gc
import weakref

import pytest

from tts_core.engine.cuda.capture_guard import no_gc_during_capture


class _Cycle:
    def __init__(self) -> None:
        self.me = self  # only the cyclic collector can free it


@pytest.fixture
def gc_state():
    was = gc.isenabled()
    yield
    gc.enable() if was else gc.disable()


def test_dead_cycles_are_collected_before_and_the_collector_is_off_inside(gc_state):
    gc.enable()
    dead = _Cycle()
    ref = weakref.ref(dead)
    del dead
    assert ref() is not None  # waits for a collection
    with no_gc_during_capture():
        assert ref() is None  # collected on the way in, not during the capture
        assert not gc.isenabled()
        inside = weakref.ref(_Cycle())
        for _ in range(10_000):  # allocations that would otherwise trigger collections
            _Cycle()
        assert inside() is not None
    assert gc.isenabled()
    gc.collect()
    assert inside() is None


def test_the_collector_comes_back_after_an_error_and_stays_off_if_it_was_off(gc_state):
    gc.enable()
    with pytest.raises(RuntimeError), no_gc_during_capture():
        raise RuntimeError("capture failed")
    assert gc.isenabled()
    gc.disable()
    with no_gc_during_capture():
        pass
    assert not gc.isenabled()
