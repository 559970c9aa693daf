"""`--quantize auto` on a machine's first start: serve at once, settle the precision in the background.

Measuring every mode before serving (quantising copies of the model and timing each) kept a CPU's
first start from its first audio for many seconds. So the loader measures fp32 alone before serving
(the models are loaded already): when it keeps up, that is the choice. When it does not, the server
starts in int8, the fastest mode, and `settle_cpu_mode` measures fp16 and int8 in the background,
each measurement taken while the engine has nothing to do (and taken again when a request arrived
meanwhile). When fp16 runs in real time, the engine switches to it at an idle moment, between
requests (`Engine.when_idle`, `Runner.replace_models`). The choice is kept for the next start
(`cpu_mode_cache.py`), which applies it before serving without measuring.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cpu_mode_cache
from .cpu_mode import ModeChoice, choose_cpu_mode, measure_frame_s
from .engine.types import EngineStats

logger = logging.getLogger(__name__)

QUIET_S = 1.0  # the engine without streams this long before a measurement
POLL_S = 0.05
# ... and the process using at most this share of one core meanwhile: other start-up work (the page's
# build, voice clips being encoded, prefixes computed) would make a mode look slower than it is.
BUSY_SHARE = 0.25
PROVISIONAL = "int8"  # the fastest mode: what a first start serves while the others are measured


class SettleCancelled(Exception):
    """The server stopped before the precision was settled."""


@dataclass(frozen=True, slots=True)
class PendingMode:
    """A first start served `PROVISIONAL` because fp32 was measured too slow (`fp32_rtf`); what
    `settle_cpu_mode` needs to measure the rest: fresh fp32 models, and where to keep the choice."""

    load_fp32: Callable[[], tuple[Any, Any]]
    fp32_rtf: float
    pipelined: bool
    cache_dir: Path
    key: str

    def provisional_choice(self) -> ModeChoice:
        return ModeChoice(PROVISIONAL, {"fp32": self.fp32_rtf},
                          f"auto: {PROVISIONAL} for now: fp32 runs slower than real time here (RTF "
                          f"{self.fp32_rtf:.2f}); fp16 is measured while the server is idle", settled=False)


class QuietMeasure:
    """`measure` for `choose_cpu_mode` that measures only while the engine has no stream, and
    measures again when one arrived meanwhile (its numbers would be the two sharing the CPU).

    Args:
        stats: the engine's `stats()` (`EngineStats`: its load and submitted count).
        stop: set when the server stops; waiting then raises SettleCancelled.
        measure, clock, sleep: the real ones, or fakes in tests.
    """

    def __init__(self, stats: Callable[[], EngineStats], *, stop: threading.Event,
                 measure: Callable[..., float] = measure_frame_s, quiet_s: float = QUIET_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 cpu_clock: Callable[[], float] = time.process_time):
        self._stats, self._stop, self._measure = stats, stop, measure
        self._quiet_s, self._clock, self._sleep, self._cpu_clock = quiet_s, clock, sleep, cpu_clock
        self.retries = 0

    def wait_quiet(self) -> EngineStats:
        """Block until the engine has had no stream, and the process little CPU work, for `quiet_s`;
        returns the engine's stats then."""
        since = None  # (wall, process CPU) seconds when the quiet began
        while True:
            if self._stop.is_set():
                raise SettleCancelled("the server is stopping")
            stats = self._stats()
            now = self._clock(), self._cpu_clock()
            if stats.load:
                since = None
            elif since is None:
                since = now
            elif now[0] - since[0] >= self._quiet_s:
                if now[1] - since[1] <= BUSY_SHARE * (now[0] - since[0]):
                    return stats
                since = now  # busy with other work: wait for another quiet stretch
            self._sleep(POLL_S)

    def __call__(self, lm, codec, *, pipelined: bool) -> float:
        while True:
            before = self.wait_quiet()
            seconds = self._measure(lm, codec, pipelined=pipelined)
            after = self._stats()
            if not after.load and after.submitted == before.submitted:
                return seconds
            self.retries += 1
            logger.info("CPU mode measurement overlapped a request; measuring again at the next idle moment")


def settle_cpu_mode(pending: PendingMode, engine, *, stop: threading.Event,
                    apply: Callable[[Any, Any, ModeChoice], None],
                    measure: Callable[..., float] | None = None) -> ModeChoice | None:
    """Measure fp16 and int8 at idle moments, keep the choice in the cache, and `apply(lm, codec,
    choice)`: the models of the chosen mode when it is not `PROVISIONAL` (the caller switches the
    engine), else (None, None, choice). Returns the choice, or None when the server stopped first.
    `measure` (tests): seconds per frame of (lm, codec, pipelined=...), taken at idle moments."""
    quiet = measure if measure is not None else QuietMeasure(engine.stats, stop=stop)
    try:
        if isinstance(quiet, QuietMeasure):
            quiet.wait_quiet()  # reading and quantising copies is work too: not beside a stream
        lm, codec = pending.load_fp32()
        lm, codec, choice = choose_cpu_mode(lm, codec, pipelined=pending.pipelined, measure=quiet,
                                            modes=("fp16", "int8"), known={"fp32": pending.fp32_rtf})
    except SettleCancelled:
        return None
    cpu_mode_cache.store_choice(pending.cache_dir, pending.key, choice)
    logger.info("CPU mode settled: %s", choice.reason)
    if choice.mode == PROVISIONAL:
        apply(None, None, choice)  # the engine already serves it
    else:
        apply(lm, codec, choice)
    return choice
