"""GPU only (skipped without CUDA): decoded audio back to the host, through the reused pinned
buffers (`engine/host_copy.py`) and decodes queued back to back on the static path, exact.

Full-size models from the real configs with random weights (as the bench). Nothing here asserts a
timing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.gpu_runners import CUDA, build_runner

from tts_core.engine.host_copy import HostPcm, PinnedRing

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def fp32_models(full_models):
    return full_models(torch.float32)


def test_host_pcm_gives_each_row_its_own_exact_copy():
    """Audio comes back through the reused pinned buffer exactly, on a side stream too, and a later
    fetch (which overwrites that buffer) leaves the rows handed out earlier untouched."""
    generator = torch.Generator(device=CUDA).manual_seed(0)
    first = torch.randn(5, 2, 3 * 3840, device=CUDA, generator=generator)
    fetch = HostPcm()
    side = torch.cuda.Stream(CUDA)
    side.wait_stream(torch.cuda.current_stream(CUDA))
    with torch.cuda.stream(side):
        rows = fetch.fetch(first * 2)  # produced on the side stream, waited for there
    want = (first * 2).cpu().numpy()
    assert len(rows) == 5 and all(np.array_equal(row, w) for row, w in zip(rows, want))
    size = fetch.buffer_bytes
    again = fetch.fetch(torch.zeros(3, 2, 2 * 3840, device=CUDA))
    assert fetch.buffer_bytes == size  # a smaller batch reuses the buffer
    assert all(np.array_equal(row, w) for row, w in zip(rows, want)) and not any(a.any() for a in again)
    assert not any(np.shares_memory(a, b) for i, a in enumerate(rows) for b in rows[i + 1:])


def test_pinned_ring_reads_out_copies_in_flight_exactly():
    """Copies queued into the ring before any is read out come back exact, each row its own memory;
    a buffer is reused only after its readout, and reusing it leaves the rows handed out intact."""
    generator = torch.Generator(device=CUDA).manual_seed(1)
    sources = [torch.randn(4, 2, (i + 1) * 3840, device=CUDA, generator=generator) for i in range(3)]
    want = [s.cpu().numpy() for s in sources]
    ring = PinnedRing(count=2)
    side = torch.cuda.Stream(CUDA)
    side.wait_stream(torch.cuda.current_stream(CUDA))
    with torch.cuda.stream(side):
        first, second = ring.copy_async(sources[0] * 1), ring.copy_async(sources[1] * 1)
        got_first = first.result()
        third = ring.copy_async(sources[2] * 1)  # the first one's buffer, free again
    got_second, got_third = second.result(), third.result()
    for got, w in ((got_first, want[0]), (got_second, want[1]), (got_third, want[2])):
        assert len(got) == 4 and all(np.array_equal(row, r) for row, r in zip(got, w))
    rows = got_first + got_second + got_third
    assert not any(np.shares_memory(a, b) for i, a in enumerate(rows) for b in rows[i + 1:])


@torch.inference_mode()
def test_decodes_queued_back_to_back_equal_decodes_waited_for(fp32_models):
    """The codec thread queues the next decode before the last one is read out (its staging buffers
    alternate): the audio is bit for bit what one decode at a time gives, over 1-, 2-, 4- and 7-frame
    groups of changing slots."""
    models = fp32_models
    generator = np.random.default_rng(5)
    groups = [([0, 2, 3], 1), ([1, 2], 4), ([0, 1, 2, 3], 2), ([3], 7), ([0, 2], 4), ([1, 3], 1)]
    codes = [generator.integers(0, 1024, (len(slots), n, 16)) for slots, n in groups]
    # Plain step units: the decodes are the subject, and neither runner's LM step runs.
    waited, queued = (build_runner(models, 4, compile="off") for _ in range(2))
    want = [waited.decode(slots, c) for (slots, _), c in zip(groups, codes)]
    pending = [queued.decode_async(slots, c) for (slots, _), c in zip(groups[:2], codes[:2])]
    got = []
    for (slots, _), c in zip(groups[2:], codes[2:]):
        got.append(pending.pop(0).result())
        pending.append(queued.decode_async(slots, c))
    got += [p.result() for p in pending]
    for w, g in zip(want, got):
        assert all(np.array_equal(a, b) for a, b in zip(w, g))
