"""Tests that need CUDA (skipped without it; run on the GPU machine as tests/README.md says).
Every test here is marked `gpu`.

Building a graphed runner (compiling its step's units, capturing its CUDA graphs) is most of this
folder's cost, so runners are built once per session and shared (`runners`): a test leaves every
slot released (`drive` and a finished engine do), so the next one starts from clean slots. Shapes
are the smallest that still test each property: 240 KV rows (two attention-length buckets) and 4
or 8 slots.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.folders import mark_folder, parity_root
from support.gpu_runners import CUDA, build_runner

HERE = Path(__file__).resolve().parent
ZEROGPU_CHILD = HERE.parent / "support" / "zerogpu_child.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE, pytest.mark.gpu)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the ZeroGPU flow's child now when its tests will run: it compiles on its own cores
    while the tests before it compile theirs (its fixture waits for it)."""
    if not torch.cuda.is_available() or not any(item.path.name == "test_zerogpu_gpu.py" for item in session.items):
        return
    import tempfile

    if (parity_root() / "parity").is_dir():
        session.config.zerogpu_child = start_zerogpu_flow(parity_root(), Path(tempfile.mkdtemp(prefix="zerogpu-aoti-")))


def pytest_unconfigure(config: pytest.Config) -> None:
    child = getattr(config, "zerogpu_child", None)
    if child is not None and child.poll() is None:  # the session ended before its tests waited for it
        child.kill()
        child.communicate()


def start_zerogpu_flow(data_dir: Path, aoti_dir: Path) -> subprocess.Popen:
    """`support/zerogpu_child.py` started (see test_zerogpu_gpu.py), its output piped back."""
    return subprocess.Popen([sys.executable, "-X", "faulthandler", str(ZEROGPU_CHILD), str(data_dir), str(aoti_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="session")
def zerogpu_child(request, data_dir, tmp_path_factory) -> subprocess.Popen:
    """The ZeroGPU flow's child: the one started after collection, else one started now."""
    started = getattr(request.config, "zerogpu_child", None)
    return started or start_zerogpu_flow(data_dir, tmp_path_factory.mktemp("aoti"))


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


def pytest_terminal_summary(terminalreporter) -> None:
    """Where this folder's time went: torch.compile's own per-function times (most of the suite)."""
    import sys

    if "torch._dynamo" not in sys.modules:
        return
    from torch._dynamo.utils import compile_times

    terminalreporter.write_sep("-", "torch.compile time per function (s)")
    terminalreporter.write_line(str(compile_times(repr="str", aggregate=True)))
