"""The test command itself: it keeps off the user's cache and says what it sets up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tts_core.loader import default_cache_dir

REPO = Path(__file__).resolve().parents[2]


def test_the_session_never_uses_the_users_cache():
    """Every test, and every app a test starts (it inherits the environment), caches in a folder of
    this session: the user's ~/.cache/moss_tts_studio (or $XDG_CACHE_HOME's) is never read or written."""
    used = default_cache_dir().resolve()
    users = [Path.home() / ".cache" / "moss_tts_studio"]
    if os.environ.get("XDG_CACHE_HOME"):
        users.append(Path(os.environ["XDG_CACHE_HOME"]) / "moss_tts_studio")
    for user_cache in users:
        assert used != user_cache.resolve() and user_cache.resolve() not in used.parents, used
    assert used.name.startswith("moss-tts-test-cache-"), used
    child = subprocess.run([sys.executable, "-c", "from tts_core.loader import default_cache_dir as d; print(d())"],
                           cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert Path(child.stdout.strip()).resolve() == used


@pytest.mark.slow
def test_test_sh_announces_each_set_up_step():
    """scripts/test.sh on an environment that has everything: it names each step before it runs
    it (here: the pip check), then runs pytest with the arguments given."""
    env = {**os.environ, "VENV": sys.prefix}
    result = subprocess.run(["bash", "scripts/test.sh", "--version"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    steps = [line for line in result.stdout.splitlines() if line.startswith("test.sh: ")]
    assert steps[0].startswith("test.sh: installing the test requirements"), result.stdout
    assert steps[-1] == "test.sh: set-up done; running pytest --version", result.stdout
    assert "pytest" in result.stdout + result.stderr
