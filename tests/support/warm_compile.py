"""Fills torch.compile's on-disk caches with some of the LM step's compiled units, in a process of
its own, so that the GPU tests' first compiled runner finds them there instead of compiling each
unit in turn (tests/gpu/conftest.py starts one of these per unit right after collection).

It compiles exactly what that runner's start-up compiles (`static_step.compile_on_scratch` over the
runner's batch buckets and KV columns, the fp32 LM of the real config) but only for the named units;
the others run plain. The compiled graphs do not depend on the weights' values (they are inputs),
so the LM keeps its initial weights.

usage: PYTHONPATH=. python tests/support/warm_compile.py LM_CONFIG NUM_SLOTS MAX_ROWS UNIT[,UNIT...] [DEVICE]
"""

from __future__ import annotations

import sys

import torch

from tts_core.engine.cuda.buckets import bucket_sizes, kv_columns
from tts_core.engine.cuda.static_step import compile_on_scratch
from tts_core.model import lm_step
from tts_core.model.lm import MossTTSNanoLM
from tts_core.model.lm_config import LMConfig


def units_with_compiled(names: list[str]) -> lm_step.StepUnits:
    compiled = lm_step.StepUnits.compiled("inductor")
    unknown = set(names) - set(lm_step.StepUnits.__dataclass_fields__)
    if unknown:
        raise SystemExit(f"unknown step units: {', '.join(sorted(unknown))}")
    return lm_step.StepUnits(**{name: getattr(compiled, name) for name in names})


def scratch_shapes(num_slots: int, max_rows: int) -> tuple[list[int], int]:
    """The batch buckets and KV columns a static runner of that size compiles its units over
    (tests/engine/test_static_engine.py checks them against a runner's start-up)."""
    return bucket_sizes(num_slots), kv_columns(max_rows)


def main(lm_config: str, num_slots: int, max_rows: int, names: list[str], device: torch.device) -> None:
    lm = MossTTSNanoLM(LMConfig.from_json(lm_config)).to(device=device, dtype=torch.float32)
    lm = lm.eval().requires_grad_(False)
    compile_on_scratch(lm, units_with_compiled(names), *scratch_shapes(num_slots, max_rows), device)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(","),
         torch.device(sys.argv[5] if len(sys.argv) > 5 else "cuda"))
