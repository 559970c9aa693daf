"""Tests that need CUDA (skipped without it; run on the GPU machine as tests/README.md says).
Every test here is marked `gpu`.

Building a graphed runner (compiling its step's units, capturing its CUDA graphs) is most of this
folder's cost, so runners are built once per session and shared (`runners`): a test leaves every
slot released (`drive` and a finished engine do), so the next one starts from clean slots. Shapes
are the smallest that still test each property: 240 KV rows (two attention-length buckets) and 4
or 8 slots.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.folders import mark_folder
from support.gpu_runners import CUDA, build_runner

HERE = Path(__file__).resolve().parent
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE, pytest.mark.gpu)


@pytest.fixture(scope="session")
def config_paths(data_dir: Path) -> tuple[str, str]:
    return str(data_dir / "hf_checkpoint_meta" / "config.json"), str(data_dir / "codec" / "config.json")


@pytest.fixture(scope="session")
def full_models(config_paths):
    """(lm, codec) of the real sizes with random weights, per LM dtype, built once."""
    from bench.lib import build_random_models

    built: dict[torch.dtype, tuple] = {}

    def get(dtype: torch.dtype):
        if dtype not in built:
            built[dtype] = build_random_models(*config_paths, CUDA, dtype)
        return built[dtype]

    return get


@pytest.fixture(scope="session")
def prompts(config_paths):
    from bench.lib import make_prompt
    from tts_core.model.lm_config import LMConfig

    config = LMConfig.from_json(config_paths[0])
    return [make_prompt(config, 100 + 13 * (i % 7), seed=i) for i in range(16)]  # different lengths


@pytest.fixture(scope="session")
def runners(full_models):
    """`runners(dtype, slots, **options)`: the session's runner of that kind, built on first use."""
    built: dict[tuple, object] = {}

    def get(dtype: torch.dtype, num_slots: int, **kwargs):
        key = (dtype, num_slots, tuple(sorted(kwargs.items())))
        if key not in built:
            built[key] = build_runner(full_models(dtype), num_slots, **kwargs)
        return built[key]

    return get
