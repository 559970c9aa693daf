"""The CPUs this process may run on (torch-free: the web server and the encoder pool ask before the
engine, and torch with it, is imported)."""

from __future__ import annotations

import os


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
