"""Peak memory while one bench level runs (not the process's lifetime maximum).

CUDA: `torch.cuda.max_memory_allocated`, its peak reset when the level starts. CPU: resident memory
sampled every few milliseconds by a thread while the level runs; `ru_maxrss` would only ever grow
over the process's life, so a later level could never show less than an earlier one.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

_PAGE_BYTES = 4096
_SAMPLE_EVERY_S = 0.005


def rss_bytes() -> int | None:
    """Resident memory of this process (Linux /proc; psutil elsewhere, when installed)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process().memory_info().rss


class PeakMemory:
    """Context manager: `result()` gives {kind, peak_mib, growth_mib} for what ran inside it.

    growth_mib is the peak minus what was in use on entry: what the level itself added (its KV caches,
    graphs, activations), while peak_mib includes the models and everything before.
    """

    def __init__(self, devices: list[torch.device]):
        self.cuda = [d for d in devices if d.type == "cuda"]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0
        self._peak = 0

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            for device in self.cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            self._start = sum(torch.cuda.memory_allocated(d) for d in self.cuda)
            return self
        self._start = self._peak = rss_bytes() or 0
        self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(_SAMPLE_EVERY_S):
            self._peak = max(self._peak, rss_bytes() or 0)

    def __exit__(self, *exc) -> None:
        if self.cuda:
            for device in self.cuda:
                torch.cuda.synchronize(device)
            self._peak = sum(torch.cuda.max_memory_allocated(d) for d in self.cuda)
            return
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self._peak = max(self._peak, rss_bytes() or 0)

    def result(self) -> dict:
        if not self.cuda and not self._start:
            return {"kind": "unavailable", "peak_mib": None, "growth_mib": None}
        return {"kind": "cuda_allocated" if self.cuda else "rss", "peak_mib": round(self._peak / 2**20, 1),
                "growth_mib": round((self._peak - self._start) / 2**20, 1)}
