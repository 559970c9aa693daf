"""A single prompt's prefill captured as CUDA graphs, one per length bucket.

Run eagerly or compiled, a lone prompt's prefill is bound by host work (kernel launches); one graph
replay moves it to the GPU. The prompt is right-padded to its bucket with copies of its last row
(causal attention: the real rows never see the padding; junk keys stay hidden by the slot's
length). Several prompts at once, or one longer than the largest bucket, take the batched pass.
"""

from __future__ import annotations

import numpy as np
import torch

from ...model.layers import attention_backends
from .capture_guard import no_gc_during_capture

# Prompt lengths captured: a voice-clone prompt is ~80 template rows + up to ~250 reference frames +
# the text, so most land in the first few buckets; at most a third of a replay is padding.
PREFILL_BUCKETS = (128, 192, 256, 384, 512, 768, 1024, 1536, 2048)


def _bucket(length: int, buckets: list[int]) -> int | None:
    return next((size for size in buckets if size >= length), None)


class PrefillGraphs:
    """Graphed one-prompt prefill through `forward` (`StepUnits.prefill`, compiled) into the runner's
    `cache` and `hidden` [R, H]; warm-up and capture write only `spare_row`, a row no stream uses."""

    def __init__(self, lm, cache, hidden: torch.Tensor, spare_row: int, forward):
        self.lm = lm
        self.cache = cache
        self.hidden = hidden
        self.spare_row = spare_row
        self.forward = forward
        self.buckets = [size for size in PREFILL_BUCKETS if size <= cache.max_len]
        width, dev = lm.config.row_width, hidden.device
        most = self.buckets[-1] if self.buckets else 0
        self.rows_in = torch.zeros(1, most, width, dtype=torch.long, device=dev)
        self.index_in = torch.zeros(2, dtype=torch.long, device=dev)  # slot, prompt length - 1
        self.host_rows = torch.zeros(most, width, dtype=torch.long, pin_memory=True)
        self.host_index = torch.zeros(2, dtype=torch.long, pin_memory=True)
        self._copied = torch.cuda.Event()  # the host buffers were read by the last copies
        self._copied.record()
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        lm.rope.get(cache.max_len, dev)  # grown outside any capture

    def fits(self, length: int) -> bool:
        bucket = _bucket(length, self.buckets)
        return bucket is not None and bucket in self._graphs

    def _body(self, length: int) -> None:
        x = self.lm.embed_rows(self.rows_in[:, :length], validate=False)  # [1, T, H]
        cos, sin = self.lm.rope.span(0, length, x.device, x.dtype)
        cos, sin = cos[None, :, None, None], sin[None, :, None, None]
        slot = self.index_in[:1]
        with attention_backends():
            h = self.forward(self.lm.transformer, x, cos, sin, self.cache.k, self.cache.v, slot)  # [1, T, H]
        self.hidden.index_copy_(0, slot, h[0].index_select(0, self.index_in[1:]))

    @torch.inference_mode()
    def capture(self, pool) -> None:
        """Capture every bucket (largest first); the warm-ups and captures write only the spare row."""
        self.index_in.copy_(torch.tensor([self.spare_row, 0]))
        stream = torch.cuda.Stream(self.hidden.device)
        with no_gc_during_capture():  # nested in CudaGraphs.capture too: harmless
            for length in reversed(self.buckets):
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(2):
                        self._body(length)
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                    self._body(length)
                self._graphs[length] = graph
        torch.cuda.synchronize(self.hidden.device)

    @torch.inference_mode()
    def run(self, slot: int, rows: np.ndarray) -> None:
        """Prefill prompt rows [T, 17] into `slot` (T must fit: see `fits`); sets the slot's last hidden
        state. Host to device copies and the replay are queued on the current stream, no sync."""
        length = rows.shape[0]
        bucket = _bucket(length, self.buckets)
        self._copied.synchronize()  # long done: the previous prefill's copies
        host = self.host_rows[:bucket].numpy()
        host[:length] = rows
        host[length:] = rows[-1]
        self.host_index[0], self.host_index[1] = slot, length - 1
        self.rows_in[0, :bucket].copy_(self.host_rows[:bucket], non_blocking=True)
        self.index_in.copy_(self.host_index, non_blocking=True)
        self._copied.record()
        self._graphs[bucket].replay()
