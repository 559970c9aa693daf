"""Choosing the CPU precision mode at start-up: the most faithful one that keeps up here.

CPUs differ a lot in how fast they stream weights (the frame loop is bound by that), so the
choice is measured, not guessed: a few frames of one stream in fp32, then (if that is too slow)
with fp16 weights, then int8. The first mode whose real-time factor is at most `REALTIME_RTF`
wins; when none is, the fastest (int8) does, and the reason says so. `--quantize` forces a mode.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .config import SamplingParams
from .engine.sampler import StreamSampler, batch_for_frame
from .model import lm_step
from .model.codec_rows import RowDecoder
from .model.quant import quantize_codec, quantize_lm
from .model.row_linear import make_rows_independent

logger = logging.getLogger(__name__)

MODES_BY_FIDELITY = ("fp32", "fp16", "int8")
REALTIME_RTF = 0.8  # margin for the server's own work (HTTP, encoding) and slower moments
FRAME_S = 0.08
_PROMPT_ROWS = 96


@dataclass(frozen=True, slots=True)
class ModeChoice:
    """The chosen mode, the measured RTF of each mode tried, and a one-line reason for the page."""

    mode: str
    rtf: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    settled: bool = True  # False: served for now, the more faithful modes not measured yet (cpu_mode_settle.py)


@torch.inference_mode()
def measure_frame_s(lm, codec, *, pipelined: bool, frames: int = 4) -> float:
    """Seconds per 80 ms frame for one stream as the CPU runner makes it (`engine/eager_runner.py`:
    row-independent linears, swapped on copies here, so the candidates stay as they are): an LM step
    and a one-frame codec decode (their max when the codec runs on its own core, else their sum);
    medians over `frames` after a warm-up."""
    lm, codec = copy.deepcopy(lm), copy.deepcopy(codec)
    make_rows_independent(lm, lm_step.ROW_LINEARS)
    decoder = RowDecoder(codec)
    c = lm.config
    rows = torch.full((_PROMPT_ROWS, c.row_width), c.audio_pad_id, dtype=torch.long)
    rows[:, 0] = 100  # any text id: the cost does not depend on the values
    cache = lm.new_cache(1, _PROMPT_ROWS + frames + 2)
    hidden = lm.prefill(rows, cache, 0)[None]
    local = lm.new_local_cache(1)
    sampler = StreamSampler(SamplingParams.greedy(), 0, n_vq=c.n_vq, codebook_size=max(c.audio_codebook_sizes))
    state = codec.new_decode_state(1)
    lm_s, codec_s = [], []
    for _ in range(frames + 1):
        start = time.perf_counter()
        _, codes = lm.generate_frame(hidden, batch_for_frame([sampler]), local=local, units=lm_step.ROWS)
        hidden = lm.decode_rows(codes, cache, [0])
        middle = time.perf_counter()
        decoder.decode(codes[:, None].clamp(max=1023), state, [0])  # [1, 1, 16]
        lm_s.append(middle - start)
        codec_s.append(time.perf_counter() - middle)
    lm_t, codec_t = sorted(lm_s[1:])[frames // 2], sorted(codec_s[1:])[frames // 2]
    return max(lm_t, codec_t) if pipelined else lm_t + codec_t


def choose_cpu_mode(lm, codec, *, pipelined: bool, report: Callable[[str], None] = lambda _line: None,
                    measure: Callable[..., float] = measure_frame_s, modes: tuple[str, ...] = MODES_BY_FIDELITY,
                    known: dict[str, float] | None = None) -> tuple[object, object, ModeChoice]:
    """Returns (lm, codec, choice): the models in the chosen mode (quantised copies, or the fp32
    originals) and why. The fp32 models are left untouched when another mode wins. `measure`
    (lm, codec, pipelined=...) -> seconds per frame; tests pass a fake clock. `modes` are measured
    in order of fidelity; `known` holds RTFs measured before (of modes not in `modes`, all slower
    than real time: a first start measures fp32 before serving, `cpu_mode_settle.py` the rest)."""
    rtf: dict[str, float] = dict(known or {})
    candidates = {"fp32": (lm, codec)}
    for mode in modes:
        if mode != "fp32":
            report(f"measuring CPU speed with {mode} weights…")
            candidates[mode] = (quantize_lm(copy.deepcopy(lm), mode), quantize_codec(copy.deepcopy(codec), mode))
        else:
            report("measuring CPU speed in fp32…")
        rtf[mode] = measure(*candidates[mode], pipelined=pipelined) / FRAME_S
        logger.info("CPU mode %s: RTF %.2f", mode, rtf[mode])
        if rtf[mode] <= REALTIME_RTF:
            return *candidates[mode], ModeChoice(mode, rtf, realtime_reason(mode, rtf[mode]))
    mode = min(rtf, key=rtf.get)
    reason = f"auto: {mode}, the fastest mode here, and still slower than real time (RTF {rtf[mode]:.2f})"
    return *candidates[mode], ModeChoice(mode, rtf, reason)


def realtime_reason(mode: str, rtf: float) -> str:
    return f"auto: {mode}, the most faithful mode that runs in real time here (RTF {rtf:.2f})"
