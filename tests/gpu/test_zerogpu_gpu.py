"""ZeroGPU's flow on this GPU: the documented module-level placement reaches a new worker's GPU and an
idle worker keeps it; a worker with AOTInductor step units gives the eager worker's greedy codes in
fp32, with every unit compiled into a package; the main process never initialises CUDA.

It runs in a fresh interpreter (`support/zerogpu_child.py`): this pytest process has used CUDA for
other tests, and a forked worker of such a process cannot use the GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CHILD = Path(__file__).resolve().parents[1] / "support" / "zerogpu_child.py"


@pytest.fixture(scope="module")
def flow(data_dir, tmp_path_factory) -> dict:
    aoti_dir = tmp_path_factory.mktemp("aoti")
    done = subprocess.run([sys.executable, "-X", "faulthandler", str(CHILD), str(data_dir), str(aoti_dir)],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_placed_weights_reach_a_new_worker_and_an_idle_worker_keeps_them(flow):
    assert flow["first_moved_bytes"] > 0 and flow["first_move_s"] > 0
    assert flow["second_moved_bytes"] == 0
    assert flow["again_codes"] == flow["eager_codes"]


def test_aoti_worker_gives_the_eager_workers_codes_in_fp32(flow):
    assert flow["packages"] == ["finish", "local", "norm", "qkv"]  # every unit compiled, none left eager
    assert len(flow["aoti_codes"]) == len(flow["eager_codes"]) > 0
    assert flow["aoti_codes"] == flow["eager_codes"]


def test_the_main_process_never_initialises_cuda(flow):
    assert flow["parent_cuda_initialized"] is False
