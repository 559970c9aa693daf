"""The CPU mode measured at start-up (`--quantize auto`) is kept in the cache dir and applied at the
next start on the same machine, torch and model shape, without measuring again."""

from __future__ import annotations

import json

import pytest
import torch

from tts_core import cpu_mode_cache
from tts_core.config import EngineConfig
from tts_core.cpu_mode import ModeChoice
from tts_core.loader import _apply_precision
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm


@pytest.fixture
def tiny(data_dir):
    parity = data_dir / "parity"
    return load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec")


def test_a_choice_round_trips_and_other_keys_miss(tmp_path, tiny):
    lm, _ = tiny
    key = cpu_mode_cache.choice_key(lm.config, pipelined=True)
    assert cpu_mode_cache.load_choice(tmp_path, key) is None
    choice = ModeChoice("fp16", {"fp32": 1.3, "fp16": 0.7}, "auto: fp16 ...")
    cpu_mode_cache.store_choice(tmp_path, key, choice)
    assert cpu_mode_cache.load_choice(tmp_path, key) == choice
    assert cpu_mode_cache.load_choice(tmp_path, cpu_mode_cache.choice_key(lm.config, pipelined=False)) is None
    assert torch.__version__ in key
    (tmp_path / cpu_mode_cache.FILE_NAME).write_text("{not json")
    assert cpu_mode_cache.load_choice(tmp_path, key) is None  # a broken file means: measure again
    cpu_mode_cache.store_choice(tmp_path, key, choice)
    assert json.loads((tmp_path / cpu_mode_cache.FILE_NAME).read_text())[key]["mode"] == "fp16"


def test_auto_measures_once_then_applies_the_kept_choice(tmp_path, monkeypatch, data_dir, tiny):
    monkeypatch.setenv("MOSS_TTS_CACHE_DIR", str(tmp_path))
    lines: list[str] = []
    lm, codec = tiny
    _, _, first = _apply_precision(lm, codec, "auto", torch.device("cpu"), EngineConfig(), lines.append)
    assert any("measuring CPU speed" in line for line in lines)
    assert (tmp_path / cpu_mode_cache.FILE_NAME).is_file()
    # Pretend the earlier start chose int8: the next start applies it without measuring.
    entries = json.loads((tmp_path / cpu_mode_cache.FILE_NAME).read_text())
    (only,) = entries
    entries[only] = {"mode": "int8", "rtf": {"int8": 0.5}, "reason": "auto: int8 (test)"}
    (tmp_path / cpu_mode_cache.FILE_NAME).write_text(json.dumps(entries))
    lines.clear()
    parity = data_dir / "parity"
    lm2, codec2 = load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec")
    lm2, _, again = _apply_precision(lm2, codec2, "auto", torch.device("cpu"), EngineConfig(), lines.append)
    assert not any("measuring" in line for line in lines), lines
    assert lines == ["CPU mode int8, as measured at an earlier start on this machine"]
    assert again.mode == "int8" and again.reason == "auto: int8 (test) (measured at an earlier start)"
    assert first.mode in ("fp32", "fp16", "int8")
    assert any("Linear" in type(m).__name__ and type(m) is not torch.nn.Linear for m in lm2.modules())  # quantised
