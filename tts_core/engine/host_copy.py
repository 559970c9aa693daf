"""Decoded audio from the device to host arrays the caller owns, through one reused pinned buffer.

A plain `.cpu()` of a batch's PCM copies into freshly allocated pageable memory: the driver stages
the copy through its own pinned buffer and the new pages fault in while it runs. On an H200 host,
256 rows x 8 frames (63 MB) took 37 ms that way, a third of that codec pass's GPU time
(`.gpu` profile, 2026-12-01). Here the device writes into a pinned buffer that lives as long as
the stepper, at the link's speed; each row is then copied once on the host into an array of its
own (blocks of one row's size, which the allocator reuses), so no caller ever holds a view of the
reused buffer.
"""

from __future__ import annotations

import numpy as np
import torch


class HostPcm:
    """Copies PCM [B, 2, S] from the device to a list of B host arrays [2, S] (float32).

    Not thread-safe: the buffer is reused by the next call, so one thread at a time (the runner's
    decodes are serialised by the engine).
    """

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    @property
    def buffer_bytes(self) -> int:
        return 0 if self._buffer is None else self._buffer.numel() * self._buffer.element_size()

    def fetch(self, pcm: torch.Tensor) -> list[np.ndarray]:
        """Rows of `pcm` as host arrays; waits for the device work that produced `pcm` (on the
        current stream) and for nothing else."""
        if pcm.device.type != "cuda":
            return list(pcm.float().numpy())  # already on the host: rows of one fresh array
        pcm = pcm.float()
        count = pcm.numel()
        if self._buffer is None or self._buffer.numel() < count:
            # Power-of-two growth: batch sizes and chunk lengths vary, the buffer settles quickly.
            self._buffer = torch.empty(1 << max(0, count - 1).bit_length(), dtype=torch.float32,
                                       pin_memory=True)
        host = self._buffer[:count].view(pcm.shape)
        host.copy_(pcm, non_blocking=True)
        torch.cuda.current_stream(pcm.device).synchronize()  # releases the GIL while it waits
        # torch's clone releases the GIL too (a numpy copy of this size would hold it).
        return [row.clone().numpy() for row in host]
