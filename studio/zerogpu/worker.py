"""ZeroGPU mode, engine side: one request per GPU call, run eagerly in a forked worker process.

The server process never initialises CUDA; it keeps a pristine fp32 copy of both models
(`GPUWeights`), placed "on cuda" in its main thread before serving (`place_weights`). The decorated
generator (`make_gpu_stream`) receives a built `Stream` and, in the worker, runs it on the server's
own runner + `Engine` with one slot, eagerly, yielding its chunks; closing it cancels the stream.
`gpu_decorator()` picks `spaces.GPU` on a Space, `harness.GPU` elsewhere (docs/DEPLOY.md).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from tts_core.config import EngineConfig
from tts_core.devices import resolve_lm_dtype
from tts_core.engine.cuda.static_runner import StaticRunner
from tts_core.engine.engine import Engine
from tts_core.engine.runner_types import build_runner
from tts_core.engine.stream import Stream
from tts_core.types import AudioChunk

from .env import ZEROGPU_ENV, on_zerogpu_space

logger = logging.getLogger(__name__)

# GPU seconds asked for per call: worker start (fork, CUDA init, weights to the GPU) plus the
# generation at a pessimistic eager RTF of 1, within what ZeroGPU grants. Shorter asks are
# scheduled sooner; a call that runs past its duration may be stopped.
GPU_OVERHEAD_S = 10.0
GPU_SECONDS_PER_AUDIO_S = 1.0
GPU_MIN_S, GPU_MAX_S = 20, 240
_CONTEXT_ROWS = EngineConfig().max_context_rows


@dataclass(frozen=True, slots=True)
class GPUWeights:
    """Both models (eval, fp32) on the server's CPU, never used there, for the workers to move to
    their GPU. `dtype`: the LM's `--dtype` ("auto" resolved in the worker); `max_context_rows`: as
    the server's engine; `aoti_dir`: AOTInductor package cache (CUDA only; None: plain eager step)."""

    lm: torch.nn.Module
    codec: torch.nn.Module
    dtype: str = "auto"
    max_context_rows: int = _CONTEXT_ROWS
    aoti_dir: str | None = None


def load_gpu_weights(lm_dir: str | Path, codec_dir: str | Path, *, dtype: str = "auto",
                     max_context_rows: int = _CONTEXT_ROWS, aoti_dir: str | None = None) -> GPUWeights:
    """Read both checkpoints onto the CPU (fp32). Call it in the server process, before any GPU call."""
    from tts_core.model.codec_loading import load_codec
    from tts_core.model.lm_loading import load_lm

    return GPUWeights(lm=load_lm(lm_dir, device="cpu", dtype=torch.float32),
                      codec=load_codec(codec_dir, device="cpu", dtype=torch.float32),
                      dtype=dtype, max_context_rows=max_context_rows, aoti_dir=aoti_dir)


def place_weights(weights: GPUWeights, backend: str) -> GPUWeights:
    """The documented module-level placement: both models "on cuda" in the server process. With
    `spaces` that is `.to("cuda")`, recorded by its CUDA emulation (main thread, before serving);
    with the harness `harness.place_on_cuda`, which moves them in each worker before its calls."""
    if backend == "spaces":
        weights.lm.to("cuda")
        weights.codec.to("cuda")
    else:
        from .harness import place_on_cuda

        place_on_cuda(weights.lm)
        place_on_cuda(weights.codec)
    return weights


def gpu_seconds(stream: Stream) -> int:
    """The `duration` of a GPU call for a built `stream`: overhead + generation time, bounded."""
    wanted = GPU_OVERHEAD_S + GPU_SECONDS_PER_AUDIO_S * stream.estimated_audio_s
    return int(min(GPU_MAX_S, max(GPU_MIN_S, math.ceil(wanted))))


def worker_device() -> torch.device:
    """The worker's device: its GPU (ZeroGPU, or the harness on a GPU machine), else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


class WorkerEngine:
    """The server's engine with one slot, eager, on the worker's device (built once per worker)."""

    def __init__(self, weights: GPUWeights):
        self.weights = weights
        self.device = device = worker_device()
        lm_dtype = resolve_lm_dtype(weights.dtype, device)
        # Placed modules are on `device` already (a no-op move then); unplaced ones (a caller that
        # skipped `place_weights`) are moved here. Either way the worker's copy: the server
        # process's modules do not change.
        lm = weights.lm.to(device=device, dtype=lm_dtype)
        codec = weights.codec.to(device)
        runner = build_runner(lm, codec, num_slots=1, max_context_rows=weights.max_context_rows, device=device,
                              enforce_eager=True, compile="off")
        self.aoti = None
        if weights.aoti_dir and isinstance(runner, StaticRunner) and device.type == "cuda":
            # torch.compile is unavailable on ZeroGPU; AOTInductor packages are not (one stream: B = 1).
            from .aoti import build_aoti_units

            runner.graphs.units, self.aoti = build_aoti_units(lm, batch=1, device=device, cache_dir=weights.aoti_dir)
        self.engine = Engine(runner, EngineConfig(max_active_streams=1, max_queue=0,
                                                  max_context_rows=weights.max_context_rows))
        logger.info("ZeroGPU worker %d: engine on %s (LM %s, %s step)", os.getpid(), device,
                    str(lm_dtype).removeprefix("torch."), runner.step_kind)

    def stream(self, stream: Stream) -> Iterator[AudioChunk]:
        """The stream's chunks as the engine makes them; closing the iterator cancels the stream."""
        self.engine.submit(stream)
        try:
            yield from stream
        finally:
            stream.close()


_worker_engine: WorkerEngine | None = None  # per process: set in a worker at its first call


def worker_engine(weights: GPUWeights) -> WorkerEngine:
    global _worker_engine
    if _worker_engine is None or _worker_engine.weights is not weights:
        # A forked child must not enter the OpenMP thread team its parent started (GNU OpenMP hangs
        # there, e.g. after the server's CPU engine ran): one CPU thread, as DataLoader workers do.
        # The worker's heavy work is on its GPU.
        torch.set_num_threads(1)
        _worker_engine = WorkerEngine(weights)
    return _worker_engine


GPUDecorator = Callable[..., Callable]


def make_gpu_stream(weights: Callable[[], GPUWeights], gpu: GPUDecorator) -> Callable[[Stream], Iterator[AudioChunk]]:
    """The decorated generator: `stream(built)` yields a built stream's chunks, generated in a GPU
    worker. `weights()` gives the loaded `GPUWeights` (read through the fork, never pickled); `gpu`
    is `spaces.GPU` or `harness.GPU`; the call's duration comes from `gpu_seconds`."""

    def stream_on_gpu(stream: Stream) -> Iterator[AudioChunk]:
        yield from worker_engine(weights()).stream(stream)

    return gpu(duration=gpu_seconds)(stream_on_gpu)


def gpu_decorator() -> tuple[GPUDecorator, str]:
    """(`spaces.GPU`, "spaces") on a ZeroGPU Space with the package, else (the harness's GPU, "harness")."""
    if on_zerogpu_space():
        try:
            import spaces

            return spaces.GPU, "spaces"
        except ImportError:
            logger.warning("%s is set but the spaces package is missing: using the local ZeroGPU harness",
                           ZEROGPU_ENV)
    from .harness import GPU

    return GPU, "harness"
