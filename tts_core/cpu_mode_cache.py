"""The CPU precision mode chosen by measurement (`cpu_mode.choose_cpu_mode`), kept for the next start.

Measuring fp32, then fp16 and int8 weights is the longest step of a CPU start after reading the
weights, and its answer only changes with the machine, the torch build and the model's shape. So
the choice is stored in the cache dir (`cpu-mode.json`, one entry per such key) and a later start
with `--quantize auto` applies it directly; a different machine, thread count, torch version or
model shape measures again. Delete the file to measure again anyway. An entry kept unsettled (fp32
measured too slow, the server stopped before fp16 was measured) starts in int8 at once and settles
in the background as the first start would have (`cpu_mode_settle.py`).
"""

from __future__ import annotations

import json
import logging
import os
import platform
from pathlib import Path

import torch

from .cpu_mode import ModeChoice
from .devices import available_cpus

logger = logging.getLogger(__name__)

FILE_NAME = "cpu-mode.json"


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
    """The stored choice for `key`, or None (no file, no entry, or a file that does not parse)."""
    try:
        entry = json.loads((cache_dir / FILE_NAME).read_text()).get(key)
        if entry is None:
            return None
        return ModeChoice(entry["mode"], {k: float(v) for k, v in entry["rtf"].items()}, entry["reason"],
                          bool(entry.get("settled", True)))
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
    entries[key] = {"mode": choice.mode, "rtf": choice.rtf, "reason": choice.reason, "settled": choice.settled}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{FILE_NAME}.{os.getpid()}")
        partial.write_text(json.dumps(entries, indent=1))
        partial.replace(path)
    except OSError as exc:  # a read-only cache costs a measurement next time, nothing else
        logger.warning("could not keep the CPU mode choice in %s: %s", path, exc)
