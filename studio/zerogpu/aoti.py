"""The LM's frame-step units compiled ahead of time: `torch.export` + AOTInductor, no torch.compile.

The transformer units of `lm_step` (exported with the plain ops) become `.pt2` packages whose
module weights are graph inputs, so one package serves every layer; the sampling units stay plain.
Packages are named by shapes, dtype, device architecture and torch version and compiled for one
batch (B = 1); another batch, a failed export or compile, or a package that does not load runs the
plain function instead (the reason logged once). docs/DEPLOY.md, "Ahead-of-time compiled step".
"""

from __future__ import annotations

import hashlib
import logging
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from tts_core.model import fused_ops, lm_step
from tts_core.model.layers import block_finish, block_qkv

logger = logging.getLogger(__name__)

AOT_UNITS = ("local", "qkv", "finish", "norm")
PACKAGE_FORMAT = 2  # part of every package's name: bump it when what is exported changes
# Settings for the package's compile: the C++ wrapper at -O0 with precompiled headers (the kernels
# keep inductor's own flags): the wrapper only launches kernels, so it need not be optimised.
COMPILE_CONFIGS = {"aot_inductor.compile_wrapper_opt_level": "O0", "aot_inductor.precompile_headers": True}


def device_arch(device: torch.device) -> str:
    """What a compiled package is specific to: the GPU's SM version, or the CPU's machine type."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    return f"{device.type}-{platform.machine() or 'unknown'}"


class _Bound(nn.Module):
    """`fn(module, *args)` as a module's forward (so `functional_call` can swap its weights)."""

    def __init__(self, fn: Callable, module: nn.Module):
        super().__init__()
        self.fn = fn
        self.m = module

    def forward(self, *args):
        return self.fn(self.m, *args)


class _WeightsAsInputs(nn.Module):
    """Exports `fn(template, *args)` with the template's weights as graph inputs, so one package
    serves every module of the template's shape (all layers of a stack)."""

    def __init__(self, fn: Callable, template: nn.Module):
        super().__init__()
        self.fn = fn
        object.__setattr__(self, "template", template)  # not registered: its tensors are not constants

    def forward(self, weights: dict[str, torch.Tensor], *args):
        bound = _Bound(self.fn, self.template)
        return torch.func.functional_call(bound, {f"m.{name}": t for name, t in weights.items()}, args)


def module_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


@dataclass
class AotUnit:
    """One unit as a compiled package, called like the plain function: `unit(module, *args)`."""

    name: str
    plain: Callable
    batch: int
    batch_arg: int  # which argument (after the module) carries the batch in dim 0
    package: Callable | None = None
    _weights: dict[int, tuple[nn.Module, dict[str, torch.Tensor]]] = field(default_factory=dict, repr=False)

    def __call__(self, module: nn.Module, *args):
        if self.package is None or args[self.batch_arg].shape[0] != self.batch:
            return self.plain(module, *args)
        held = self._weights.get(id(module))
        if held is None or held[0] is not module:
            held = self._weights[id(module)] = (module, module_tensors(module))
        return self.package(held[1], *args)


@dataclass(frozen=True)
class AotReport:
    """What `build_aoti_units` did per unit: "loaded" (from the cache), "compiled", or why eager."""

    outcome: dict[str, str]
    seconds: dict[str, float]
    arch: str
    folder: str


def _examples(lm, batch: int, device: torch.device, dtype: torch.dtype) -> dict[str, tuple[nn.Module, tuple]]:
    """A module and example arguments per unit, with the shapes the frame step passes."""
    config = lm.config
    local = lm.new_local_cache(batch, device)
    keys, values = local.keys_values(batch)
    block = lm.transformer.h[0]
    heads, head_dim = block.attn.num_heads, block.attn.head_dim
    # Distinct tensors for distinct arguments: export takes one tensor passed twice (cos as sin)
    # for an alias and compiles a graph that reads one input for both.
    def example(*shape):
        return torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)

    generator = torch.Generator().manual_seed(0)
    hidden = example(batch, config.hidden_size)
    h = example(batch, 1, config.hidden_size)
    cos, sin = example(batch, 1, 1, 1, head_dim // 2), example(batch, 1, 1, 1, head_dim // 2)
    attn = example(batch, heads, 1, head_dim)
    return {
        "local": (lm.local_transformer, (hidden, local.index[0], local.cos[0], local.sin[0], keys, values,
                                         local.key_pos)),
        "qkv": (block, (h, cos, sin)),
        "finish": (block, (h, attn)),
        "norm": (lm.transformer.ln_f, (h,)),
    }


_PLAIN = {"local": lm_step.local_position, "qkv": block_qkv, "finish": block_finish, "norm": lm_step.final_norm}


def package_name(unit: str, module: nn.Module, args: tuple, arch: str) -> str:
    """The cache name of a unit's package: what it was compiled for, hashed."""
    shapes = [(n, tuple(t.shape), str(t.dtype)) for n, t in module_tensors(module).items()]
    flat = [a for arg in args for a in (arg if isinstance(arg, list) else [arg])]
    shapes += [(tuple(t.shape), str(t.dtype)) for t in flat]
    digest = hashlib.sha256(repr((PACKAGE_FORMAT, unit, shapes, torch.__version__)).encode()).hexdigest()[:16]
    return f"{unit}-{arch}-{digest}.pt2"


def compile_package(unit: str, module: nn.Module, args: tuple, path: Path) -> Path:
    """Export `unit` over `module`'s shape and compile it into the package `path`."""
    with fused_ops.plain_ops():  # a raw Triton launch cannot be exported (a FakeTensor has no data)
        exported = torch.export.export(_WeightsAsInputs(_PLAIN[unit], module), (module_tensors(module), *args),
                                       strict=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.pt2")  # a crash mid-write leaves no package that looks whole
    torch._inductor.aoti_compile_and_package(exported, package_path=str(partial), inductor_configs=COMPILE_CONFIGS)
    partial.replace(path)
    return path


def _to(value, device: torch.device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [_to(item, device) for item in value]
    return value


def compile_from_job(job_file: str) -> None:
    """A build process's work: the unit, module and example arguments that `_compile_elsewhere`
    saved, compiled into the package named there."""
    job = torch.load(job_file, map_location="cpu", weights_only=False)
    device = torch.device(job["device"])
    with torch.inference_mode(False), torch.no_grad():
        compile_package(job["unit"], job["module"].to(device), tuple(_to(a, device) for a in job["args"]),
                        Path(job["path"]))


# Each package is compiled in a process of its own, all units at once: export and inductor's
# lowering are single-threaded Python, so a unit's compile does not speed up another's, and a
# worker's first call waits for the slowest unit instead of their sum.
_ROOT = Path(__file__).resolve().parents[2]
_BUILD = ("-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                "from studio.zerogpu.aoti import compile_from_job; compile_from_job(sys.argv[2])")
BUILD_TIMEOUT_S = 1800

# A package is loaded in a separate process before this one trusts it: a loader that crashes
# (docs/DEPLOY.md) then costs that process, not the GPU worker; the unit stays eager. The outcome is
# kept beside the package: an `.ok` marker, or a `.failed` file with the reason (delete to recheck).
_LOAD_CHECK = ("-c", "import sys, torch; torch._inductor.aoti_load_package(sys.argv[1])")
LOAD_CHECK_TIMEOUT_S = 120


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1][:200]


def _compile_elsewhere(unit: str, module: nn.Module, args: tuple, path: Path, device: torch.device) -> str | None:
    """Compile `unit` into `path` in a separate process; None when the package was written, else why not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    job = path.with_suffix(".job")
    torch.save({"unit": unit, "module": module, "args": list(args), "path": str(path), "device": str(device)}, job)
    try:
        done = subprocess.run([sys.executable, *_BUILD, str(_ROOT), str(job)], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"compiling it took over {BUILD_TIMEOUT_S} s"
    finally:
        job.unlink(missing_ok=True)
    if done.returncode != 0 or not path.is_file():
        return f"compiling it failed (exit {done.returncode}) {_last_line(done.stderr)}".rstrip()
    return None


def failed_reason(path: Path) -> str | None:
    """Why `path` failed its load check, as kept beside it; None when it has not failed one."""
    failed = path.with_suffix(".failed")
    if not failed.is_file():
        return None
    return failed.read_text(encoding="utf-8").strip() or "it failed its load check before"


def loads_cleanly(path: Path) -> str | None:
    """None when `path` loads in a fresh process, else why not; the first check's outcome is kept
    (an `.ok` marker or a `.failed` file) and given again without another process."""
    marker = path.with_suffix(".ok")
    if marker.is_file():
        return None
    kept = failed_reason(path)
    if kept is not None:
        return kept
    try:
        done = subprocess.run([sys.executable, *_LOAD_CHECK, str(path)], capture_output=True, text=True,
                              timeout=LOAD_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # maybe a busy machine: not kept, checked again next time
        return f"loading it took over {LOAD_CHECK_TIMEOUT_S} s in a separate process"
    if done.returncode != 0:
        reason = f"a separate process that loaded it exited with {done.returncode} {_last_line(done.stderr)}".rstrip()
        path.with_suffix(".failed").write_text(reason + "\n", encoding="utf-8")
        return reason
    marker.touch()
    return None


@dataclass(frozen=True)
class _Prepared:
    outcome: str  # "loaded", "compiled", or "eager: why"
    seconds: float

    @property
    def usable(self) -> bool:
        return not self.outcome.startswith("eager")


def _prepare(unit: str, module: nn.Module, args: tuple, path: Path, device: torch.device,
             compile_missing: bool) -> _Prepared:
    """The package at `path` made ready to load here: compiled if missing (and allowed), then
    checked in a separate process. Runs in a thread of its own; the work is in child processes."""
    started = time.perf_counter()
    if path.is_file():
        outcome = "loaded"
    elif not compile_missing:
        return _Prepared("eager: no package in the cache", 0.0)
    else:
        problem = _compile_elsewhere(unit, module, args, path, device)
        outcome = f"eager: {problem}" if problem else "compiled"
    if not outcome.startswith("eager"):
        problem = loads_cleanly(path)
        outcome = f"eager: {problem}" if problem else outcome
    return _Prepared(outcome, time.perf_counter() - started)


def build_aoti_units(lm, *, batch: int, device: torch.device, cache_dir: str | Path,
                     units: tuple[str, ...] = AOT_UNITS, base: lm_step.StepUnits = lm_step.EAGER,
                     compile_missing: bool = True) -> tuple[lm_step.StepUnits, AotReport]:
    """`base` with the transformer units replaced by AOTInductor packages for `batch` streams, from
    `cache_dir/<arch>/` or else compiled there (unless `compile_missing` is False), every missing
    unit at once in processes of their own. Returns the units and a report (per unit: its compile,
    load check and load seconds)."""
    dtype = next(lm.parameters()).dtype
    arch = device_arch(device)
    folder = Path(cache_dir) / arch
    with torch.inference_mode(False), torch.no_grad():
        examples = _examples(lm, batch, device, dtype)
    paths = {unit: folder / package_name(unit, *examples[unit], arch) for unit in units}
    with ThreadPoolExecutor(max_workers=max(1, len(units)), thread_name_prefix="aoti") as pool:
        futures = {unit: pool.submit(_prepare, unit, *examples[unit], paths[unit], device, compile_missing)
                   for unit in units}
        prepared = {unit: future.result() for unit, future in futures.items()}
    outcome, seconds, replaced = {}, {}, {}
    for unit in units:
        started, package = time.perf_counter(), None
        outcome[unit] = prepared[unit].outcome
        if prepared[unit].usable:
            try:
                package = torch._inductor.aoti_load_package(str(paths[unit]))
            except Exception as exc:  # checked in a separate process, yet refused here: stays eager
                outcome[unit] = f"eager: {type(exc).__name__}: {_last_line(str(exc))}"
        if package is None and outcome[unit] != "eager: no package in the cache":
            logger.warning("AOTInductor: the %s unit stays eager (%s)", unit, outcome[unit])
        seconds[unit] = round(prepared[unit].seconds + time.perf_counter() - started, 3)
        replaced[unit] = AotUnit(unit, _PLAIN[unit], batch=batch, batch_arg=0, package=package)
    report = AotReport(outcome=outcome, seconds=seconds, arch=arch, folder=str(folder))
    logger.info("AOTInductor units for B=%d on %s: %s", batch, arch, outcome)
    return replace(base, **replaced), report
