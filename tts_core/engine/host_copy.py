"""Decoded audio from the device to host arrays the caller owns, through reused pinned buffers.

The device writes into a pinned buffer that lives as long as the CUDA graphs (not fresh pageable memory:
docs/PERFORMANCE.md); the rows are then copied on the host into arrays of their own, so no caller
ever holds a view of a reused buffer. `HostPcm` waits for its copy; `PinnedRing` returns at once
and is read out later by the codec readout thread (`pipeline.py`).
"""

from __future__ import annotations

import threading

import numpy as np
import torch


def copy_rows(host: torch.Tensor) -> list[np.ndarray]:
    """Rows of a host tensor [B, ...] as fresh float32 arrays, copied in one torch call, which
    releases the interpreter lock once for all rows (a clone per row re-takes it per row; a numpy
    copy holds it throughout)."""
    rows = [np.empty(host.shape[1:], np.float32) for _ in range(host.shape[0])]
    torch._foreach_copy_([torch.from_numpy(row) for row in rows], list(host.unbind(0)))
    return rows


class ReadyPcm:
    """A decode's host arrays, already there (the synchronous paths)."""

    def __init__(self, rows: list[np.ndarray]):
        self._rows = rows

    def result(self) -> list[np.ndarray]:
        return self._rows


class _PinnedSlot:
    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None
        self.free = threading.Event()  # its last copy was read out (or it was never used)
        self.free.set()


class PendingPcm:
    """A device-to-host copy in flight into one slot of a `PinnedRing` (see there)."""

    def __init__(self, host: torch.Tensor, done: torch.cuda.Event, slot: _PinnedSlot):
        self._host = host
        self._done = done
        self._slot = slot

    def result(self) -> list[np.ndarray]:
        """The rows as host arrays of their own; waits for this copy alone, then frees the slot.
        Call it exactly once."""
        try:
            self._done.synchronize()  # releases the GIL while it waits
            return copy_rows(self._host)
        finally:
            self._slot.free.set()


class PinnedRing:
    """Decoded audio copies in flight: `copy_async` queues a decode's copy into the next of `count`
    pinned buffers and returns at once, so the next decode launches while another thread reads this
    one out (`PendingPcm.result`). A buffer is reused only once its last copy was read out
    (`copy_async` waits for that), so at most `count` copies are pending."""

    def __init__(self, count: int = 3):
        self._slots = [_PinnedSlot() for _ in range(count)]
        self._next = 0

    @property
    def buffer_bytes(self) -> int:
        return sum(0 if s.buffer is None else s.buffer.numel() * s.buffer.element_size() for s in self._slots)

    def copy_async(self, pcm: torch.Tensor) -> PendingPcm:
        """Queue the copy of `pcm` [B, 2, S] (on CUDA, after the work queued on the current stream)."""
        slot = self._slots[self._next]
        self._next = (self._next + 1) % len(self._slots)
        slot.free.wait()
        slot.free.clear()
        try:
            pcm = pcm.float()
            count = pcm.numel()
            if slot.buffer is None or slot.buffer.numel() < count:
                # Power-of-two growth: batch sizes and chunk lengths vary, the buffer settles quickly.
                slot.buffer = torch.empty(1 << max(0, count - 1).bit_length(), dtype=torch.float32,
                                          pin_memory=True)
            host = slot.buffer[:count].view(pcm.shape)
            host.copy_(pcm, non_blocking=True)
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(pcm.device))
        except BaseException:
            slot.free.set()
            raise
        return PendingPcm(host, done, slot)


class HostPcm:
    """Copies PCM [B, 2, S] from the device to B host arrays [2, S] (float32) and waits: `PinnedRing`
    with one buffer, read out at once. Not thread-safe: the next call reuses the buffer."""

    def __init__(self) -> None:
        self._ring = PinnedRing(count=1)

    @property
    def buffer_bytes(self) -> int:
        return self._ring.buffer_bytes

    def fetch(self, pcm: torch.Tensor) -> list[np.ndarray]:
        """Rows of `pcm` as host arrays; waits for the device work that produced `pcm` (on the
        current stream) and for nothing else."""
        if pcm.device.type != "cuda":
            return list(pcm.float().numpy())  # already on the host: rows of one fresh array
        return self._ring.copy_async(pcm).result()
