"""ZeroGPU's flow on this GPU: the documented module-level placement reaches a new worker's GPU and an
idle worker keeps it; a worker with AOTInductor step units gives the eager worker's greedy codes in
fp32, with every unit compiled into a package that loads (an expected failure where torch's loader
crashes, as on the H200's torch 2.11); the main process never initialises CUDA.

It runs in a fresh interpreter (`support/zerogpu_child.py`): this pytest process has used CUDA for
other tests, and a forked worker of such a process cannot use the GPU.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def flow(zerogpu_child) -> dict:
    """What the child saw (it runs in its own interpreter; the conftest starts it early, so its
    compiles run beside the other tests' on the machine's otherwise idle cores)."""
    child = zerogpu_child
    try:
        stdout, stderr = child.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        child.kill()
        stdout, stderr = child.communicate()
    assert child.returncode == 0, f"exit {child.returncode}\n{stdout[-2000:]}\n{stderr[-6000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


def test_placed_weights_reach_a_new_worker_and_an_idle_worker_keeps_them(flow):
    assert flow["first_moved_bytes"] > 0 and flow["first_move_s"] > 0
    assert flow["second_moved_bytes"] == 0
    assert flow["again_codes"] == flow["eager_codes"]


def test_aoti_worker_gives_the_eager_workers_codes_in_fp32(flow):
    assert flow["packages"] == ["finish", "local", "norm", "qkv"]  # every unit compiled
    assert len(flow["aoti_codes"]) == len(flow["eager_codes"]) > 0
    assert flow["aoti_codes"] == flow["eager_codes"]  # with the packages, or eager where one did not load


# What the H200's torch 2.11.0+cu130 does with every AOTInductor package, CPU or CUDA, whatever the
# compile settings (docs/DEPLOY.md): its loader crashes the loading process with SIGSEGV.
LOADER_CRASH = "a separate process that loaded it exited with -11"


def test_every_aoti_package_loads(flow):
    """Each package passed its load check, so the worker ran it (the test above holds either way)."""
    problems = flow["load_problems"]
    if problems and all((why or "").startswith(LOADER_CRASH) for why in problems.values()):
        pytest.xfail(f"torch {torch.__version__}: the AOTInductor loader crashed on every package "
                     f"({', '.join(sorted(problems))}); the units stayed eager")
    assert problems == {}
    assert flow["loaded"] == flow["packages"]


def test_the_main_process_never_initialises_cuda(flow):
    assert flow["parent_cuda_initialized"] is False
