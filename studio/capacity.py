"""How many streams one engine generates together when `--max-active-streams` is not given.

A stream slot costs the same on every device until the device is saturated, so the default follows
what the device carries while every listener stays ahead of real time:

- CUDA: `GPU_ACTIVE_STREAMS` per GPU engine, the most streams the H200 bench record
  (`bench/results/gpu-h200.json`, `python -m bench.engine --streams ...`) held with every stream
  ahead of real time. A smaller GPU is measured the same way and set with the flag.
- CPU: one stream per usable core. Batched frames on a CPU are memory-bound matrix-vector work:
  beyond a stream per core a new stream slows every other one down (`bench/results/cpu-*.json`).

Beyond the slots, requests wait in the engine's queue (`--max-queue`) and then get 503, as before.
"""

from __future__ import annotations

from tts_core.devices import available_cpus

GPU_ACTIVE_STREAMS = 256


def default_active_streams(device_type: str, cpus: int | None = None) -> int:
    """The default slot count of an engine on a device of `device_type` ("cuda", "cpu", ...)."""
    if device_type == "cuda":
        return GPU_ACTIVE_STREAMS
    return max(1, available_cpus() if cpus is None else int(cpus))
