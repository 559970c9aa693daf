"""Drives a runner (`engine/runner_types.Runner`) directly, no engine thread: shared by the CPU
runner tests and the GPU ones."""

from __future__ import annotations

import numpy as np


def drive(runner, prompts, seeds, slots, params, frames=12, prefix_rows=0):
    """Run streams in `slots` together for up to `frames` frames (a stream leaves when it stops);
    `prefix_rows`: leading rows the prompts share (a voice prefix the runner may have cached).

    Returns per-stream codes int64 [F, 16] and PCM float32 [2, 3840 F].
    """
    for slot, rows, seed in zip(slots, prompts, seeds):
        runner.begin_stream(slot, params, seed)
        runner.start_segment(slot, rows, None, prefix_rows=prefix_rows)
    codes = [[] for _ in slots]
    pcm = [[] for _ in slots]
    alive = list(range(len(slots)))
    for _ in range(frames):
        if not alive:
            break
        is_continue, frame = runner.step([slots[i] for i in alive])
        alive = [i for j, i in enumerate(alive) if is_continue[j]]
        kept = frame[is_continue]  # [B', 16]
        for i, row in zip(alive, kept):
            codes[i].append(row)
        if alive:
            out = runner.decode([slots[i] for i in alive], kept[:, None])
            for i, piece in zip(alive, out):
                pcm[i].append(piece)
    for slot in slots:
        runner.release(slot)
    return ([np.array(c, dtype=np.int64).reshape(-1, 16) for c in codes],
            [np.concatenate(p, axis=-1) if p else np.zeros((2, 0), np.float32) for p in pcm])
