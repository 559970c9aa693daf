"""The Space's build: README's front matter uses only keys (and a hardware value) the Hub
documents, the Space's requirements keep torch inside ZeroGPU's supported range and cover every
runtime dependency, and the bundle script writes what the Hub installs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[2]

# The keys of a Space's README front matter, as the Hub documents them: hub-docs
# https://huggingface.co/docs/hub/spaces-config-reference ("Spaces Configuration Reference"; read at commits 01cb26c2
# and 34ee0f00, the latter with preload_from_hub and startup_duration_timeout), plus `license`,
# which every repository card takes (https://huggingface.co/docs/hub/repositories-licenses).
DOCUMENTED_KEYS = frozenset({
    "title", "emoji", "colorFrom", "colorTo", "sdk", "python_version", "sdk_version", "suggested_hardware",
    "suggested_storage", "app_file", "app_port", "base_path", "fullWidth", "header", "short_description",
    "models", "datasets", "tags", "thumbnail", "pinned", "hf_oauth", "hf_oauth_scopes",
    "hf_oauth_expiration_minutes", "hf_oauth_authorized_org", "disable_embedding", "startup_duration_timeout",
    "custom_headers", "preload_from_hub", "license",
})
DOCUMENTED_COLORS = frozenset({"red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray"})
DOCUMENTED_SDKS = frozenset({"gradio", "streamlit", "docker", "static"})
# suggested_hardware "must be a valid hardware flavor" (same page; the flavors of
# https://huggingface.co/docs/hub/spaces-gpus and CPU basic / upgrade of spaces-overview.md). ZeroGPU is not among them
# (`zero-a10g`, seen in many Spaces, is undocumented), so this README writes no suggested_hardware.
DOCUMENTED_HARDWARE = frozenset({
    "cpu-basic", "cpu-upgrade", "t4-small", "t4-medium", "l4x1", "l4x4", "a10g-small", "a10g-large",
    "a10g-largex2", "a10g-largex4", "a100-large", "h100", "h100x8",
})
# ZeroGPU's supported versions (https://huggingface.co/docs/hub/spaces-zerogpu, hub-docs @242f4a1e, see
# /work/shared/design/PEERS_2026-12.md section 4): torch 2.8-2.11, Python 3.12.12 or 3.10.13.
ZEROGPU_TORCH = ("2.8.0", "2.11.99")
ZEROGPU_PYTHONS = frozenset({"3.12.12", "3.10.13"})


def front_matter() -> dict:
    text = (REPO_ROOT / "README.md").read_text()
    assert text.startswith("---\n"), "README.md must open with the Space's YAML front matter"
    return yaml.safe_load(text.split("---\n")[1])


def requirements(name: str) -> dict[str, Requirement]:
    found = {}
    for line in (REPO_ROOT / name).read_text().splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "-")):
            requirement = Requirement(line)
            found[requirement.name.lower().replace("_", "-")] = requirement
    return found


def test_front_matter_uses_only_documented_keys_and_values():
    meta = front_matter()
    assert set(meta) <= DOCUMENTED_KEYS, f"undocumented keys: {sorted(set(meta) - DOCUMENTED_KEYS)}"
    assert meta["sdk"] in DOCUMENTED_SDKS and meta["sdk"] == "gradio"  # ZeroGPU runs Gradio Spaces only
    assert {meta["colorFrom"], meta["colorTo"]} <= DOCUMENTED_COLORS
    if "suggested_hardware" in meta:
        assert meta["suggested_hardware"] in DOCUMENTED_HARDWARE
    assert str(meta["python_version"]) in ZEROGPU_PYTHONS
    assert Version(str(meta["sdk_version"])).major == 6  # requirements.txt: gradio>=6,<7
    assert meta["startup_duration_timeout"].endswith(("m", "h"))


def test_the_checker_refuses_what_the_hub_does_not_document():
    assert "zero-a10g" not in DOCUMENTED_HARDWARE and "hardware" not in DOCUMENTED_KEYS


def test_space_requirements_hold_torch_in_zerogpus_range():
    torch = requirements("requirements-spaces.txt")["torch"]
    low, high = ZEROGPU_TORCH
    for inside in ("2.8.0", "2.9.1", "2.10.0", "2.11.0"):
        assert torch.specifier.contains(inside), inside
    for outside in ("2.7.1", "2.12.0", "2.13.0"):
        assert not torch.specifier.contains(outside), outside
    assert Version(low) <= Version("2.8.0") and Version(high) > Version("2.11.0")


def test_space_requirements_cover_every_runtime_dependency():
    local, space = requirements("requirements.txt"), requirements("requirements-spaces.txt")
    assert set(local) == set(space), "requirements-spaces.txt must list what requirements.txt lists"
    for name, requirement in local.items():
        if name != "torch":
            assert space[name].specifier == requirement.specifier, name
    assert "spaces" not in space  # ZeroGPU hardware brings its own


def _bundle_module():
    spec = importlib.util.spec_from_file_location("space_bundle", REPO_ROOT / "scripts" / "space_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bundle_writes_the_app_with_the_space_requirements(tmp_path):
    out = tmp_path / "space"
    result = subprocess.run([sys.executable, "scripts/space_bundle.py", str(out)], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (out / "requirements.txt").read_text() == (REPO_ROOT / "requirements-spaces.txt").read_text()
    assert (out / "app.py").is_file() and (out / "README.md").is_file()
    assert (out / "studio" / "zerogpu" / "relay.py").is_file() and (out / "static" / "studio" / "player.js").is_file()
    assert not (out / "tests").exists() and not (out / "requirements-dev.txt").exists()
    with pytest.raises(SystemExit, match="not empty"):
        _bundle_module().write_bundle(out)
