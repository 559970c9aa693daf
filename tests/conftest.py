"""Shared fixtures: where the parity data lives, the tiny checkpoints; helpers are in `support/`.

Each folder's own conftest marks what the folder holds (`support.folders.mark_folder`), so a test
file dropped into `e2e/`, `gpu/` or `reliability/` is marked like its neighbours.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# OpenMP threads that wait for work sleep instead of spinning (read when torch loads its OpenMP
# runtime, so before the first `import torch`; the apps the tests start inherit it): on a machine
# shared with other work, a spinning thread burns the core its partner needs, and two-thread tests
# crawl.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Without a GPU, Triton kernels (model/fused_ops.py) run in Triton's interpreter on CPU tensors;
# it is chosen when a kernel is defined, so before any tts_core model module is imported.
if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

from tts_core.env import env_flag

REPO_ROOT = Path(__file__).resolve().parent.parent
# Shared helpers and fixtures live in tests/support; each folder's conftest imports the fixtures its
# tests use (so the GPU folder needs no web stack). Rewrite the helpers' asserts too.
pytest.register_assert_rewrite("support")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# The session's own cache dir (encoded voices, saved voices, the CPU precision choice, compile caches):
# the tests and every app they start (children inherit the variable) never read or write the user's
# ~/.cache/moss_tts_studio, and no result of one run leaks into the next. MOSS_TTS_CACHE_DIR is read
# before XDG_CACHE_HOME (`tts_core.loader.default_cache_dir`); other tools' XDG caches stay where they are.
SESSION_CACHE_DIR = Path(tempfile.mkdtemp(prefix="moss-tts-test-cache-"))
os.environ["MOSS_TTS_CACHE_DIR"] = str(SESSION_CACHE_DIR)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(SESSION_CACHE_DIR, ignore_errors=True)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A folder whose every test `-m` deselects (`-m "not e2e and not slow"` and e2e/, reliability/)
    is not even imported: the inner loop skips their imports (Playwright, schemathesis, ...)."""
    from support.folders import deselects_folder

    if collection_path.parent == Path(__file__).parent and deselects_folder(config.option.markexpr, collection_path):
        return True
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared MOSS-TTS-Nano data directory (real tokenizer, configs, clips, parity vectors).

    Skips when absent; fails instead when MOSS_TTS_REQUIRE_PARITY is set (CI's `.ci/run` sets it).
    """
    from support.folders import parity_root  # here: after the helpers' assert rewrite is registered

    root = parity_root()
    if not (root / "parity").is_dir():
        message = (
            f"parity data not found at {root}: set MOSS_TTS_PARITY_DIR to the moss_tts_nano_data "
            "directory (default ../shared/moss_tts_nano_data from the repo root)"
        )
        if env_flag("MOSS_TTS_REQUIRE_PARITY"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return root


@pytest.fixture(scope="session")
def app_server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The session's one `python app.py`, as a user starts it (`support.e2e_helpers.serve_app`), for
    every folder that asks (defined here, not in each folder's conftest: that would start one per
    folder). Imported when first asked for, so the GPU folder needs no web stack."""
    from support.e2e_helpers import serve_app

    with serve_app(data_dir, tmp_path_factory) as server:
        yield server


@pytest.fixture(scope="session")
def parity_dir(data_dir: Path) -> Path:
    return data_dir / "parity"


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models' ops are too small to gain from threads; on a shared 2-core box they only lose.
    Modules opt in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny_models(parity_dir: Path):
    """The tiny parity checkpoints: (LM, codec), loaded once per module."""
    from tts_core.model.codec_loading import load_codec
    from tts_core.model.lm_loading import load_lm

    return load_lm(parity_dir / "tiny_lm"), load_codec(parity_dir / "tiny_codec")


@pytest.fixture(scope="module")
def tiny_lm_vectors(parity_dir: Path):
    """The tiny LM's recorded reference vectors (prompts, hidden states, greedy codes)."""
    from safetensors.torch import load_file

    return load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))

