"""What reaches the log: at most a few lines per cause per interval, and no key a client sent.

A flood of bad connections makes uvicorn and asyncio log one warning or traceback per connection,
enough to fill a disk within minutes. `LogStormFilter`, on the log handlers, passes the
first `burst` records of each cause (logger + message template + exception type) per
`interval_s`, drops the rest, and notes with the next record of that cause how many it dropped.
`KeyRedactor` replaces the value of a key sent in a URL (`?api_key=...`, as the voice-agent
clients send it; uvicorn logs every socket's path) with `[redacted]`.
"""

from __future__ import annotations

import logging
import re
import threading
import time

# A secret in a query string: api_key=..., access_token=..., token=... up to the next & or space.
_URL_KEY = re.compile(r"(?i)\b(api_key|access_token|token)=[^&\s\"']+")


class LogStormFilter(logging.Filter):
    """See the module docstring. Thread-safe; `clock` is injectable for tests."""

    def __init__(self, interval_s: float = 10.0, burst: int = 3, clock=time.monotonic, max_causes: int = 1024):
        super().__init__()
        if interval_s <= 0 or burst < 1:
            raise ValueError("interval_s must be > 0 and burst >= 1")
        self.interval_s = interval_s
        self.burst = burst
        self.clock = clock
        self.max_causes = max_causes
        self.dropped_total = 0
        self._causes: dict[tuple, list] = {}  # cause -> [window start, passed in window, dropped]
        self._lock = threading.Lock()

    @staticmethod
    def cause(record: logging.LogRecord) -> tuple:
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        return record.name, record.levelno, str(record.msg)[:200], exc_type

    def filter(self, record: logging.LogRecord) -> bool:
        verdict = getattr(record, "_log_storm_verdict", None)
        if verdict is not None:  # the same record, at another handler
            return verdict
        verdict = record.levelno >= logging.CRITICAL or self._decide(record)
        record._log_storm_verdict = verdict
        return verdict

    def _decide(self, record: logging.LogRecord) -> bool:
        key, now = self.cause(record), self.clock()
        with self._lock:
            state = self._causes.get(key)
            if state is None or now - state[0] >= self.interval_s:
                dropped = state[2] if state is not None else 0
                if state is None and len(self._causes) >= self.max_causes:
                    self._forget_old(now)
                self._causes[key] = [now, 1, 0]
                if dropped:
                    record.msg = f"{record.msg} [{dropped} similar messages suppressed in the last {self.interval_s:g} s]"
                return True
            if state[1] < self.burst:
                state[1] += 1
                return True
            state[2] += 1
            self.dropped_total += 1
            return False

    def _forget_old(self, now: float) -> None:
        stale = [k for k, v in self._causes.items() if now - v[0] >= self.interval_s]
        for key in stale or list(self._causes)[: len(self._causes) // 2]:
            del self._causes[key]


class KeyRedactor(logging.Filter):
    """Rewrites a record's message and string arguments with URL keys redacted (see the module)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = _URL_KEY.sub(r"\1=[redacted]", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_URL_KEY.sub(r"\1=[redacted]", a) if isinstance(a, str) else a for a in record.args)
        return True


def install_log_filters(interval_s: float = 10.0, burst: int = 3) -> LogStormFilter:
    """Put a `KeyRedactor` and one `LogStormFilter` on every handler of the root logger (call after
    logging is set up); returns the storm filter."""
    storm, redactor = LogStormFilter(interval_s, burst), KeyRedactor()
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)
        handler.addFilter(storm)
    return storm
