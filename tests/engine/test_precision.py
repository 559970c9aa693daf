"""`--quantize auto` (`tts_core/precision.py`): a machine's first start measures before serving, in
order of fidelity until a mode keeps up, and keeps the choice; later starts apply it without
measuring. Fake measurements: no timing is asserted."""

from __future__ import annotations

import json

import pytest
import torch

from tts_core import precision
from tts_core.errors import ModelLoadError
from tts_core.model.codec_loading import load_codec
from tts_core.model.lm_loading import load_lm
from tts_core.precision import FRAME_S, ModeChoice, apply_precision

CPU = torch.device("cpu")


def _mode_of(lm) -> str:
    """fp32, fp16 or int8, read off the LM's global transformer (`model/quant.py`)."""
    kind = type(lm.transformer.h[0].attn.c_proj)
    if kind is torch.nn.Linear:
        return "fp32"
    return "int8" if lm.transformer.h[0].attn.c_proj.weight().dtype == torch.qint8 else "fp16"


class _FakeMeasure:
    """Seconds per frame by mode (RTF × 80 ms), recording which modes were measured."""

    def __init__(self, rtf: dict[str, float]):
        self.rtf, self.calls = rtf, []

    def __call__(self, lm, codec, *, pipelined: bool) -> float:
        self.calls.append(_mode_of(lm))
        return self.rtf[self.calls[-1]] * FRAME_S


@pytest.fixture
def tiny_loader(data_dir):
    parity = data_dir / "parity"
    return lambda: (load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec"))


def _auto(loader, cache_dir, measure, lines=None):
    lm, codec = loader()
    return apply_precision(lm, codec, "auto", CPU, pipelined=True, cache_dir=cache_dir, measure=measure,
                           report=(lines if lines is not None else []).append)


def test_a_first_start_measures_until_a_mode_keeps_up_and_keeps_the_choice(tmp_path, tiny_loader):
    fast = _FakeMeasure({"fp32": 0.5})
    lm, _, choice = _auto(tiny_loader, tmp_path, fast)
    assert fast.calls == ["fp32"] and choice.mode == "fp32" and _mode_of(lm) == "fp32"
    # fp32 too slow: fp16 is measured before serving, and kept since it keeps up (int8 is not measured).
    (tmp_path / precision.FILE_NAME).unlink()
    slow = _FakeMeasure({"fp32": 1.6, "fp16": 0.7, "int8": 0.5})
    lines: list[str] = []
    lm, _, choice = _auto(tiny_loader, tmp_path, slow, lines)
    assert slow.calls == ["fp32", "fp16"] and _mode_of(lm) == "fp16"
    assert choice.mode == "fp16" and choice.rtf == {"fp32": 1.6, "fp16": 0.7}
    assert "most faithful mode that runs in real time" in choice.reason
    assert lines == ["measuring CPU speed in fp32…", "measuring CPU speed with fp16 weights…"]
    # The next start applies the kept choice without measuring anything.
    again, lines = _FakeMeasure({}), []
    lm, _, kept = _auto(tiny_loader, tmp_path, again, lines)
    assert again.calls == [] and _mode_of(lm) == "fp16" and kept.mode == "fp16"
    assert lines[0] == "CPU mode fp16, as measured at an earlier start on this machine"
    assert kept.reason == f"{choice.reason} (measured at an earlier start)"


def test_nothing_real_time_takes_the_fastest(tmp_path, tiny_loader):
    measure = _FakeMeasure({"fp32": 4.0, "fp16": 1.5, "int8": 1.2})
    lm, _, choice = _auto(tiny_loader, tmp_path, measure)
    assert measure.calls == ["fp32", "fp16", "int8"] and choice.mode == "int8" and _mode_of(lm) == "int8"
    assert "still slower than real time" in choice.reason


def test_a_choice_round_trips_and_other_keys_miss(tmp_path, tiny_loader):
    lm, _ = tiny_loader()
    key = precision.choice_key(lm.config, pipelined=True)
    assert precision.load_choice(tmp_path, key) is None
    choice = ModeChoice("fp16", {"fp32": 1.3, "fp16": 0.7}, "auto: fp16 ...")
    precision.store_choice(tmp_path, key, choice)
    assert precision.load_choice(tmp_path, key) == choice
    assert precision.load_choice(tmp_path, precision.choice_key(lm.config, pipelined=False)) is None
    assert torch.__version__ in key
    (tmp_path / precision.FILE_NAME).write_text("{not json")
    assert precision.load_choice(tmp_path, key) is None  # a broken file means: measure again
    precision.store_choice(tmp_path, key, choice)
    assert json.loads((tmp_path / precision.FILE_NAME).read_text())[key]["mode"] == "fp16"


def test_an_entry_kept_before_every_mode_was_measured_is_measured_again(tmp_path, tiny_loader):
    """Earlier versions served int8 "for now" and kept that unsettled entry: it is no choice."""
    lm, _ = tiny_loader()
    key = precision.choice_key(lm.config, pipelined=True)
    (tmp_path / precision.FILE_NAME).write_text(json.dumps(
        {key: {"mode": "int8", "rtf": {"fp32": 1.6}, "reason": "auto: int8 for now", "settled": False}}))
    measure = _FakeMeasure({"fp32": 1.6, "fp16": 0.7})
    _, _, choice = _auto(tiny_loader, tmp_path, measure)
    assert measure.calls == ["fp32", "fp16"] and choice.mode == "fp16"


def test_forced_modes_measure_nothing_and_cuda_refuses_cpu_modes(tmp_path, tiny_loader):
    for mode in ("fp32", "fp16", "int8"):
        lm, codec = tiny_loader()
        lm, _, choice = apply_precision(lm, codec, mode, CPU, pipelined=True, cache_dir=tmp_path,
                                        measure=lambda *a, **k: pytest.fail("a forced mode is not measured"))
        assert _mode_of(lm) == mode and choice.mode == mode
    assert not (tmp_path / precision.FILE_NAME).exists()
    with pytest.raises(ModelLoadError, match="unknown precision"):
        apply_precision(*tiny_loader(), "int4", CPU, pipelined=True, cache_dir=tmp_path)
    with pytest.raises(ModelLoadError, match="CPU mode"):
        apply_precision(*tiny_loader(), "int8", torch.device("cuda"), pipelined=True, cache_dir=tmp_path)


def test_work_beside_the_load_starts_only_after_the_measurement(data_dir, tmp_path, monkeypatch):
    """The default voice is encoded beside the load (`loader._resolve_default_voice`), but never
    beside the measurement, which would then see a busier CPU than the one it serves on."""
    from tts_core import loader
    from tts_core.config import EngineConfig, LoadConfig

    events: list[str] = []

    def measure(lm, codec, *, pipelined):
        events.append("measure")
        return 0.5 * FRAME_S

    real_apply = loader.apply_precision
    monkeypatch.setattr(loader, "apply_precision", lambda *a, **k: real_apply(*a, **k, measure=measure))
    monkeypatch.setattr(loader, "_resolve_default_voice", lambda voices: events.append("voice"))
    parity = data_dir / "parity"
    load = LoadConfig(lm=str(parity / "tiny_lm"), codec=str(parity / "tiny_codec"), device="cpu",
                      tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"), voices_dir=data_dir / "presets",
                      cache_dir=tmp_path, allow_download=False, quantize="auto")
    parts = loader.load_parts(load, EngineConfig(max_active_streams=1), report=lambda line: None)
    parts.engine.close()
    assert events == ["measure", "voice"]
