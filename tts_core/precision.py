"""The CPU weight precision (`--quantize`): fp32, or fp16 / int8 linear layers (`model/quant.py`).

`auto` keeps the most faithful mode whose real-time factor here is at most `REALTIME_RTF`, or the
fastest when none is: CPUs differ too much in how fast they stream weights to guess. It is measured
once per machine, before the first start serves (a few frames of one stream per mode, fp32 first),
and kept in the cache dir (`cpu-mode.json`, keyed by CPU model, usable CPUs, threads, torch, model
shape and codec thread); later starts apply the kept choice without measuring. Delete the file to
measure again. On CUDA the LM keeps its dtype and the codec fp32.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .config import SamplingParams
from .devices import available_cpus
from .engine.sampler import StreamSampler, batch_for_frame
from .errors import ModelLoadError
from .model import lm_step
from .model.codec_rows import RowDecoder
from .model.quant import QUANT_MODES, quantize_codec, quantize_lm
from .model.row_linear import make_rows_independent

logger = logging.getLogger(__name__)

MODES = ("fp32", "fp16", "int8")  # by fidelity
REALTIME_RTF = 0.8  # margin for the server's own work (HTTP, encoding) and slower moments
FRAME_S = 0.08
FILE_NAME = "cpu-mode.json"
_PROMPT_ROWS = 96


@dataclass(frozen=True, slots=True)
class ModeChoice:
    """The mode served, the measured RTF of each mode tried, and a one-line reason for /health."""

    mode: str
    rtf: dict[str, float] = field(default_factory=dict)
    reason: str = ""


@torch.inference_mode()
def measure_frame_s(lm, codec, *, pipelined: bool, frames: int = 4) -> float:
    """Seconds per 80 ms frame for one stream as the CPU runner makes it (`engine/cpu.py`:
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


def choose_mode(lm, codec, *, pipelined: bool, report: Callable[[str], None] = lambda _line: None,
                measure: Callable[..., float] = measure_frame_s) -> tuple[Any, Any, ModeChoice]:
    """Returns (lm, codec, choice): the models in the chosen mode (quantised copies, or the fp32
    originals, left untouched when another mode wins) and why. Modes are measured in order of
    fidelity until one runs in real time. `measure(lm, codec, pipelined=...)` -> seconds per frame."""
    rtf: dict[str, float] = {}
    candidates = {"fp32": (lm, codec)}
    for mode in MODES:
        report(f"measuring CPU speed in {mode}…" if mode == "fp32" else f"measuring CPU speed with {mode} weights…")
        if mode != "fp32":
            candidates[mode] = (quantize_lm(copy.deepcopy(lm), mode), quantize_codec(copy.deepcopy(codec), mode))
        rtf[mode] = measure(*candidates[mode], pipelined=pipelined) / FRAME_S
        logger.info("CPU mode %s: RTF %.2f", mode, rtf[mode])
        if rtf[mode] <= REALTIME_RTF:
            reason = f"auto: {mode}, the most faithful mode that runs in real time here (RTF {rtf[mode]:.2f})"
            return *candidates[mode], ModeChoice(mode, rtf, reason)
    mode = min(rtf, key=rtf.get)
    reason = f"auto: {mode}, the fastest mode here, and still slower than real time (RTF {rtf[mode]:.2f})"
    return *candidates[mode], ModeChoice(mode, rtf, reason)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def choice_key(lm_config, *, pipelined: bool) -> str:
    """What a measured choice depends on, as one string."""
    shape = (lm_config.hidden_size, lm_config.num_layers, lm_config.local_num_layers, lm_config.n_vq)
    return json.dumps([_cpu_model(), available_cpus(), torch.get_num_threads(), torch.__version__, shape, pipelined])


def load_choice(cache_dir: Path, key: str) -> ModeChoice | None:
    """The kept choice for `key`, or None (no file, no entry, an entry an older version kept before
    measuring every mode, or a file that does not parse)."""
    try:
        entry = json.loads((cache_dir / FILE_NAME).read_text()).get(key)
        if entry is None or not entry.get("settled", True):
            return None
        return ModeChoice(entry["mode"], {k: float(v) for k, v in entry["rtf"].items()}, entry["reason"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store_choice(cache_dir: Path, key: str, choice: ModeChoice) -> None:
    """Add `choice` under `key` (written to a temporary file, then renamed: never half a file)."""
    path = cache_dir / FILE_NAME
    try:
        entries = json.loads(path.read_text()) if path.is_file() else {}
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError):
        entries = {}
    entries[key] = {"mode": choice.mode, "rtf": choice.rtf, "reason": choice.reason}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{FILE_NAME}.{os.getpid()}")
        partial.write_text(json.dumps(entries, indent=1))
        partial.replace(path)
    except OSError as exc:  # a read-only cache costs a measurement next time, nothing else
        logger.warning("could not keep the CPU mode choice in %s: %s", path, exc)


def apply_precision(lm, codec, quantize: str | None, device: torch.device, *, pipelined: bool, cache_dir: Path,
                    report: Callable[[str], None] = lambda _line: None,
                    measure: Callable[..., float] = measure_frame_s) -> tuple[Any, Any, ModeChoice]:
    """The models in the precision they serve in, and why: None/"fp32" keeps fp32, "fp16"/"int8"
    converts the linear layers, "auto" applies the choice kept for this machine or measures it now
    (see the module doc). `pipelined`: the codec decodes on its own thread; `measure` is for tests."""
    mode = (quantize or "fp32").strip().lower()
    if mode not in ("auto", *MODES):
        raise ModelLoadError(f"unknown precision {quantize!r}; use auto, {', '.join(MODES)}")
    if device.type != "cpu":
        if mode in QUANT_MODES:
            raise ModelLoadError(f"{mode} weights are a CPU mode; drop --quantize on CUDA (the LM runs in bf16 there)")
        return lm, codec, ModeChoice("fp32", reason=f"{device.type}: LM {lm.dtype}, codec fp32")
    if mode == "auto":
        key = choice_key(lm.config, pipelined=pipelined)
        known = load_choice(cache_dir, key)
        if known is None:
            lm, codec, choice = choose_mode(lm, codec, pipelined=pipelined, report=report, measure=measure)
            store_choice(cache_dir, key, choice)
            return lm, codec, choice
        report(f"CPU mode {known.mode}, as measured at an earlier start on this machine")
        mode, choice = known.mode, ModeChoice(known.mode, known.rtf, f"{known.reason} (measured at an earlier start)")
    else:
        choice = ModeChoice(mode, reason=f"{mode} (forced)" if mode != "fp32" else "fp32")
    if mode in QUANT_MODES:
        report(f"converting linear layers to {mode} weights…")
        quantize_lm(lm, mode)
        quantize_codec(codec, mode)
    return lm, codec, choice
