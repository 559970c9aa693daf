"""The default number of streams an engine generates together follows the device, resolved in one
place (`EngineConfig.for_device`, `devices.default_active_streams`)."""

from __future__ import annotations

from tts_core.config import EngineConfig
from tts_core.devices import GPU_ACTIVE_STREAMS, available_cpus, default_active_streams


def test_a_gpu_gets_the_measured_capacity():
    assert default_active_streams("cuda") == GPU_ACTIVE_STREAMS


def test_a_cpu_gets_one_stream_per_usable_core():
    assert default_active_streams("cpu", cpus=3) == 3
    assert default_active_streams("cpu", cpus=0) == 1
    assert default_active_streams("cpu") == available_cpus()


def test_the_engine_config_resolves_the_default_once_the_device_is_known():
    assert EngineConfig().max_active_streams is None  # "by device" until resolved
    assert EngineConfig().for_device("cuda").max_active_streams == GPU_ACTIVE_STREAMS
    assert EngineConfig().for_device("cpu").max_active_streams == available_cpus()
    given = EngineConfig(max_active_streams=3)
    assert given.for_device("cuda") is given  # a given count is kept
