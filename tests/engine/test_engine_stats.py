"""Engine and pool stats are typed (`engine/types.EngineStats`, `PoolStats`), and `/health` renders
them as the JSON it always had: the same keys, a pool's per-engine counts as a list."""

from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest

from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.cpu import EagerRunner
from tts_core.engine.engine import Engine
from tts_core.engine.pool import EnginePool
from tts_core.engine.stream import Segment, Stream
from tts_core.engine.types import EngineStats, PoolStats

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ENGINE_KEYS = ["active_streams", "queued", "max_active_streams", "max_queue", "submitted", "finished", "cancelled",
               "refused", "stalled"]


def _engine(tiny_models, slots: int) -> Engine:
    lm, codec = (copy.deepcopy(m) for m in tiny_models)  # an engine thread drives its own models
    return Engine(EagerRunner(lm, codec, num_slots=slots, max_context_rows=600, device="cpu"),
                  EngineConfig(max_active_streams=slots, max_queue=3))


def _finish(stream) -> None:
    list(stream)  # (an error ending it is raised)


def _job(name: str, rows: np.ndarray) -> Stream:
    return Stream(stream_id=name, segments=(Segment(rows=rows, max_frames=3),), sampling=SamplingParams(), seed=1,
                     submitted_at=time.monotonic())


def test_engine_stats_are_typed_and_render_the_same_json(tiny_models, tiny_lm_vectors):
    engine = _engine(tiny_models, 2)
    try:
        before = engine.stats()
        assert isinstance(before, EngineStats) and before.load == 0
        _finish(engine.submit(_job("one", tiny_lm_vectors["A_voice_clone_en.input_ids"].numpy())))
        stats = engine.stats()
    finally:
        engine.close()
    assert (stats.submitted, stats.finished, stats.max_active_streams, stats.max_queue, stats.stalled) == (
        1, 1, 2, 3, False)
    assert list(stats.as_dict()) == ENGINE_KEYS
    assert json.loads(json.dumps(stats.as_dict()))["finished"] == 1


def test_pool_stats_sum_the_engines_and_keep_the_per_engine_list(tiny_models, tiny_lm_vectors):
    pool = EnginePool([_engine(tiny_models, 1), _engine(tiny_models, 2)])
    try:
        for name in "ab":
            _finish(pool.submit(_job(name, tiny_lm_vectors["B_voice_clone_zh.input_ids"].numpy())))
        stats = pool.stats()
    finally:
        pool.close()
    assert isinstance(stats, PoolStats) and isinstance(stats, EngineStats)  # what `EngineLike.stats` promises
    assert (stats.engines, stats.max_active_streams, stats.max_queue, stats.finished, stats.stalled_engines) == (
        2, 3, 6, 2, 0)
    rendered = json.loads(json.dumps(stats.as_dict()))
    assert set(rendered) == {*ENGINE_KEYS, "engines", "stalled_engines", "per_engine_active"}
    assert rendered["per_engine_active"] == [0, 0] and rendered["stalled"] is False
