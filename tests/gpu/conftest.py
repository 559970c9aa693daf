"""Tests that need CUDA (skipped without it; run on the GPU machine as tests/README.md says).
Every test here is marked `gpu`.

Building a graphed runner (compiling its step's units, capturing its CUDA graphs) is most of this
folder's cost, so runners are built once per session and shared (`runners`): a test leaves every
slot released (`drive` and a finished engine do), so the next one starts from clean slots. Shapes
are the smallest that still test each property: 240 KV rows (two attention-length buckets) and 4
or 8 slots.

Compiling the step's units is the largest cost of all, and one unit after another in one process.
So right after collection a process per unit compiles it into torch.compile's on-disk caches
(`support/compile_warmup.py`), while the tests that compile nothing run; the tests marked
`compiles` run after them, once those processes are done, and build their runner from the caches.
The ZeroGPU tests run last: their child (`start_zerogpu_flow`) also starts after collection.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import compile_warmup
from support.folders import child_env, mark_folder, parity_root
from support.gpu_runners import CUDA, MAX_ROWS, build_runner

HERE = Path(__file__).resolve().parent
ZEROGPU_CHILD = HERE.parent / "support" / "zerogpu_child.py"


def _run_order(item: pytest.Item) -> int:
    """This folder's tests in three groups: those that compile nothing, then `compiles`, then ZeroGPU."""
    if item.path.name == "test_zerogpu_gpu.py":
        return 2
    return 1 if item.get_closest_marker("compiles") else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE)
    mine = [index for index, item in enumerate(items) if HERE in Path(item.path).parents]
    for index, item in zip(mine, sorted((items[i] for i in mine), key=_run_order)):  # stable within a group
        items[index] = item


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the compile warm-up and the ZeroGPU flow's child now, when tests that wait for them
    will run: they work on the machine's other cores while the first tests run."""
    if not torch.cuda.is_available() or not (parity_root() / "hf_checkpoint_meta").is_dir():
        return
    import tempfile

    if any(item.get_closest_marker("compiles") for item in session.items):
        lm_config = parity_root() / "hf_checkpoint_meta" / "config.json"
        session.config.compile_warmup = compile_warmup.start(lm_config, num_slots=8, max_rows=MAX_ROWS)
    if any(item.path.name == "test_zerogpu_gpu.py" for item in session.items) and (parity_root() / "parity").is_dir():
        session.config.zerogpu_child = start_zerogpu_flow(parity_root(), Path(tempfile.mkdtemp(prefix="zerogpu-aoti-")))


def pytest_runtest_setup(item: pytest.Item) -> None:
    warmup = getattr(item.config, "compile_warmup", None)
    if warmup is not None and item.get_closest_marker("compiles"):
        warmup.wait()  # at once after the first time


def pytest_unconfigure(config: pytest.Config) -> None:
    warmup = getattr(config, "compile_warmup", None)
    if warmup is not None:
        warmup.kill()
    child = getattr(config, "zerogpu_child", None)
    if child is not None and child.poll() is None:  # the session ended before its tests waited for it
        child.kill()
        child.communicate()


def start_zerogpu_flow(data_dir: Path, aoti_dir: Path) -> subprocess.Popen:
    """`support/zerogpu_child.py` started (see test_zerogpu_gpu.py), its output piped back."""
    return subprocess.Popen([sys.executable, "-X", "faulthandler", str(ZEROGPU_CHILD), str(data_dir), str(aoti_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(PYTHONUNBUFFERED="1"))


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
    from bench.lib.models import build_random_models

    built: dict[torch.dtype, tuple] = {}

    def get(dtype: torch.dtype):
        if dtype not in built:
            built[dtype] = build_random_models(*config_paths, CUDA, dtype)
        return built[dtype]

    return get


@pytest.fixture(scope="session")
def prompts(config_paths):
    from bench.lib.models import make_prompt
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


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """Where this folder's time went: the compile warm-up's processes, and torch.compile's own
    per-function times in this process with its cache hits (most of the suite's cost)."""
    warmup = getattr(config, "compile_warmup", None)
    if warmup is not None:
        terminalreporter.write_sep("-", "compile warm-up processes (seconds after collection)")
        for line in warmup.report():
            terminalreporter.write_line(line)
    if "torch._dynamo" not in sys.modules:
        return
    from torch._dynamo.utils import compile_times, counters

    terminalreporter.write_sep("-", "torch.compile in this process: time per function (s), cache counters")
    terminalreporter.write_line(str(compile_times(repr="str", aggregate=True)))
    terminalreporter.write_line(f"inductor {dict(counters['inductor'])}; aot_autograd {dict(counters['aot_autograd'])}")
