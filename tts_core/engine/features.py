"""What an engine actually runs, resolved once from its config and its device.

The only switch a user sets is `EngineConfig.enforce_eager` (no CUDA graphs); everything else
follows the device (a CPU has no graphs, compile, step-ahead or readout thread; a GPU without a
working Triton runs the plain ops). Logged at start-up and shown in `/health`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..model import fused_ops
from .runner_types import Runner


@dataclass(frozen=True, slots=True)
class EngineFeatures:
    """One engine's resolved features (see the module doc)."""

    device: str
    cuda_graphs: bool  # the frame step replays captured CUDA graphs
    compile: str  # how the step's units run: "inductor" or "off"
    fused_kernels: bool  # Triton kernels for the pick and the attentions (CUDA only)
    step_ahead: bool  # each LM step is launched before the previous one is read
    codec_thread: bool  # codec decodes overlap the LM's next step on a thread of their own
    split_readout: bool  # a second codec thread reads the audio out (CUDA: decodes are async)
    engine_prepares: bool  # requests are turned into prompt rows on the engine's thread
    fallback: str | None = None  # why a feature the device would normally run is off

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        on = [name for name in ("cuda_graphs", "fused_kernels", "step_ahead", "codec_thread", "split_readout",
                                "engine_prepares") if getattr(self, name)]
        text = f"{self.device}: compile={self.compile}, on: {', '.join(on) or 'none'}"
        return text + (f" (fallback: {self.fallback})" if self.fallback else "")


def resolve_features(runner: Runner, *, step_ahead: bool, pipeline, engine_prepares: bool) -> EngineFeatures:
    """The features of an engine built around `runner` (see `Engine.features`)."""
    device = runner.device
    fused = fused_ops.planned(device)  # held back while a deferred start builds them, then on
    fallback = None
    if device.type == "cuda" and not fused:
        fallback = fused_ops.disabled_reason() or "Triton is not installed: plain ops instead of fused kernels"
    return EngineFeatures(
        device=str(device), cuda_graphs=bool(runner.uses_graphs),
        compile=runner.compile_mode, fused_kernels=fused,
        step_ahead=step_ahead, codec_thread=pipeline is not None,
        split_readout=pipeline is not None and pipeline.split, engine_prepares=engine_prepares, fallback=fallback)
