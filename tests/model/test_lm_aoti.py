"""The frame step's transformer units compiled ahead of time (torch.export + AOTInductor) give the
plain step's greedy codes exactly, in fp32 on the CPU (tiny checkpoint, one stream: the ZeroGPU
worker's shape); packages are cached per device architecture and reloaded; a batch the package
was not compiled for, or a unit that fails to export, runs the plain function (eager fallback).
Compiling needs the C++ compiler (present here): slow, so a few units at tiny shapes."""

from __future__ import annotations

import shutil

import pytest
import torch

from bench.lib.aoti import greedy_run
from studio.zerogpu.aoti import AOT_UNITS, AotUnit, build_aoti_units, device_arch
from tts_core.model import lm_step
from tts_core.model.lm_loading import load_lm

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="AOTInductor needs a C++ compiler")
FRAMES = 6


@pytest.fixture(scope="module")
def lm(data_dir):
    return load_lm(data_dir / "parity" / "tiny_lm", device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def aoti(lm, tmp_path_factory):
    cache = tmp_path_factory.mktemp("aoti")
    units, report = build_aoti_units(lm, batch=1, device=torch.device("cpu"), cache_dir=cache)
    return cache, units, report


def greedy_codes(lm, units: lm_step.StepUnits, frames: int = FRAMES) -> torch.Tensor:
    return greedy_run(lm, units, frames)[0]


@pytest.mark.slow
def test_aoti_units_give_the_eager_greedy_codes_exactly_in_fp32(lm, aoti):
    _, units, report = aoti
    assert report.outcome == dict.fromkeys(AOT_UNITS, "compiled"), report.outcome
    assert report.arch == device_arch(torch.device("cpu")) and report.folder.endswith(report.arch)
    for name in AOT_UNITS:
        assert isinstance(getattr(units, name), AotUnit) and getattr(units, name).package is not None
    assert units.pick is lm_step.pick and units.decide is lm_step.decide  # sampling stays plain
    calls = []
    counting = {name: _counting(getattr(units, name), calls, name) for name in AOT_UNITS}
    aot_codes = greedy_codes(lm, lm_step.StepUnits(**{**_fields(units), **counting}))
    eager_codes = greedy_codes(lm, lm_step.EAGER)
    assert torch.equal(aot_codes, eager_codes)
    layers = len(lm.transformer.h)
    assert calls.count("qkv") == calls.count("finish") == FRAMES * layers  # one package, every layer
    assert calls.count("local") == FRAMES * (lm.config.n_vq + 1) and calls.count("norm") == FRAMES


@pytest.mark.slow
def test_packages_are_reloaded_from_the_cache_and_other_batches_run_eagerly(lm, aoti):
    cache, units, _ = aoti
    again, report = build_aoti_units(lm, batch=1, device=torch.device("cpu"), cache_dir=cache,
                                     compile_missing=False)
    assert report.outcome == dict.fromkeys(AOT_UNITS, "loaded")
    assert torch.equal(greedy_codes(lm, again, 3), greedy_codes(lm, lm_step.EAGER, 3))
    _, report = build_aoti_units(lm, batch=2, device=torch.device("cpu"), cache_dir=cache,
                                     compile_missing=False)
    assert set(report.outcome.values()) == {"eager: no package in the cache"}
    x = torch.randn(2, 1, lm.config.hidden_size)
    assert torch.equal(units.norm(lm.transformer.ln_f, x), lm_step.final_norm(lm.transformer.ln_f, x))


def test_a_unit_that_fails_to_compile_stays_eager(lm, tmp_path, monkeypatch):
    """A unit is compiled in a process of its own: one that fails there leaves no package and the
    unit eager here, with the failure's last line as the reason."""
    from studio.zerogpu import aoti as lm_aoti

    monkeypatch.setattr(lm_aoti, "_BUILD", ("-c", "raise RuntimeError('export refused (test)')"))
    units, report = build_aoti_units(lm, batch=1, device=torch.device("cpu"), cache_dir=tmp_path, units=("norm",))
    assert report.outcome == {"norm": "eager: compiling it failed (exit 1) RuntimeError: export refused (test)"}
    x = torch.randn(1, 1, lm.config.hidden_size)
    assert torch.equal(units.norm(lm.transformer.ln_f, x), lm_step.final_norm(lm.transformer.ln_f, x))
    assert not list(tmp_path.rglob("*.pt2")) and not list(tmp_path.rglob("*.job"))  # nor a job file left


def test_a_compile_job_carries_the_unit_to_its_process(lm, tmp_path, monkeypatch):
    """What a build process receives: the unit's module and example arguments, restored from the
    job file (its compile replaced by a recorder: the real compile is the slow test above)."""
    from studio.zerogpu import aoti as lm_aoti

    module, args = lm_aoti._examples(lm, 1, torch.device("cpu"), torch.float32)["local"]
    job = tmp_path / "local.job"
    torch.save({"unit": "local", "module": module, "args": list(args), "path": str(tmp_path / "x.pt2"),
                "device": "cpu"}, job)
    seen = {}
    monkeypatch.setattr(lm_aoti, "compile_package", lambda *a: seen.setdefault("call", a))
    lm_aoti.compile_from_job(str(job))
    unit, got_module, got_args, path = seen["call"]
    assert unit == "local" and path == tmp_path / "x.pt2"
    assert lm_aoti.module_tensors(got_module).keys() == lm_aoti.module_tensors(module).keys()
    assert len(got_args) == len(args) and isinstance(got_args[4], list)  # the per-layer keys stay a list
    assert all(torch.equal(a, b) for a, b in zip(got_args[4], args[4]))


def _fields(units: lm_step.StepUnits) -> dict:
    return {name: getattr(units, name) for name in lm_step.StepUnits.__dataclass_fields__}


def _counting(unit, calls: list, name: str):
    def call(*args):
        calls.append(name)
        return unit(*args)

    return call


def test_a_package_that_crashes_its_loader_stays_eager(lm, tmp_path, monkeypatch):
    """A package is loaded in a separate process first: a loader that crashes (a segfault seen on an
    H200) costs that process, and the unit stays eager here."""
    from studio.zerogpu import aoti as lm_aoti

    monkeypatch.setattr(lm_aoti, "_LOAD_CHECK", ("-c", "import os; os.abort()"))
    module, args = lm_aoti._examples(lm, 1, torch.device("cpu"), torch.float32)["norm"]
    arch = lm_aoti.device_arch(torch.device("cpu"))
    path = tmp_path / arch / lm_aoti.package_name("norm", module, args, arch)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a package")
    units, report = build_aoti_units(lm, batch=1, device=torch.device("cpu"), cache_dir=tmp_path,
                                     units=("norm",), compile_missing=False)
    assert report.outcome["norm"].startswith("eager: a separate process that loaded it exited with -6")
    assert units.norm.package is None and not path.with_suffix(".ok").exists()
    # Checked once: the reason is kept beside the package, and a later start gives it without a process.
    monkeypatch.setattr(lm_aoti, "_LOAD_CHECK", ("-c", "pass"))
    _, again = build_aoti_units(lm, batch=1, device=torch.device("cpu"), cache_dir=tmp_path,
                                units=("norm",), compile_missing=False)
    assert again.outcome == report.outcome and path.with_suffix(".failed").is_file()


def test_a_package_that_loaded_once_is_trusted_without_another_process(tmp_path, monkeypatch):
    from studio.zerogpu import aoti as lm_aoti

    path = tmp_path / "unit.pt2"
    path.write_bytes(b"x")
    monkeypatch.setattr(lm_aoti, "_LOAD_CHECK", ("-c", "pass"))
    assert lm_aoti.loads_cleanly(path) is None and path.with_suffix(".ok").is_file()
    monkeypatch.setattr(lm_aoti, "_LOAD_CHECK", ("-c", "import os; os.abort()"))
    assert lm_aoti.loads_cleanly(path) is None  # the marker: no second process
