"""studio/capacity.py: the default number of streams an engine generates together follows the device."""

from __future__ import annotations

from studio.capacity import GPU_ACTIVE_STREAMS, default_active_streams
from tts_core.devices import available_cpus


def test_a_gpu_gets_the_measured_capacity():
    assert default_active_streams("cuda") == GPU_ACTIVE_STREAMS


def test_a_cpu_gets_one_stream_per_usable_core():
    assert default_active_streams("cpu", cpus=3) == 3
    assert default_active_streams("cpu", cpus=0) == 1
    assert default_active_streams("cpu") == available_cpus()
