"""How many streams one engine generates together when `--max-active-streams` is not given.

The default is what the device carries with every listener ahead of real time: `GPU_ACTIVE_STREAMS`
per GPU engine (from the GPU engine bench; measure a smaller GPU the same way and set the flag),
one stream per usable CPU core. Beyond the slots, requests wait in the engine's queue
(`--max-queue`), then get 503. Why: docs/SERVING.md ("Slots follow the device").
"""

from __future__ import annotations

from tts_core.devices import available_cpus

GPU_ACTIVE_STREAMS = 256


def default_active_streams(device_type: str, cpus: int | None = None) -> int:
    """The default slot count of an engine on a device of `device_type` ("cuda", "cpu", ...)."""
    if device_type == "cuda":
        return GPU_ACTIVE_STREAMS
    return max(1, available_cpus() if cpus is None else int(cpus))
