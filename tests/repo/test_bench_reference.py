"""The side-by-side reference harness (bench/engine/reference.py), minus the reference itself.

The upstream code cannot be in CI, so these cover what runs around it: argument handling, finding
the upstream files in a folder, the figures' summary and the JSON record, and the two instance
wrappers that feed our prompt and keep the stream going. No timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.engine import reference, reference_upstream

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def configs(tmp_path):
    lm, codec = tmp_path / "lm_config.json", tmp_path / "codec_config.json"
    lm.write_text("{}")
    codec.write_text("{}")
    return ["--lm-config", str(lm), "--codec-config", str(codec)]


def _upstream_tree(root: Path) -> Path:
    for folder, marker in (("lm", reference_upstream.LM_MARKER), ("codec", reference_upstream.CODEC_MARKER),
                           ("upstream", reference_upstream.RUNTIME_MARKER)):
        (root / folder).mkdir(parents=True)
        (root / folder / marker).write_text(f"# {folder}\n")
        (root / folder / "__init__.py").write_text("")
    return root


def test_defaults_and_env_reference_dir(configs, monkeypatch, tmp_path):
    monkeypatch.setenv("MOSS_TTS_REFERENCE_DIR", str(tmp_path))
    args = reference.parse_args(configs)
    assert args.reference_dir == str(tmp_path)
    assert (args.device, args.frames, args.repeats, args.prompt_rows, args.threads) == ("cpu", 40, 3, 200, None)
    assert reference.parse_args([*configs, "--reference-dir", "elsewhere"]).reference_dir == "elsewhere"


@pytest.mark.parametrize(("extra", "needle"), [
    (["--frames", "0"], "--frames must be >= 1"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--prompt-rows", "10"], "--prompt-rows must be >= 80"),
    (["--device", "cuda", "--threads", "2"], "--threads applies to --device cpu only"),
    (["--precisions", "fp32,bf8"], "--precisions: unknown bf8"),
])
def test_bad_arguments_name_the_flag(configs, tmp_path, extra, needle):
    with pytest.raises(SystemExit) as exc:
        reference.parse_args([*configs, "--reference-dir", str(tmp_path), *extra])
    assert exc.value.code == 2
    namespace = reference.argparse.Namespace(
        reference_dir=str(tmp_path), device="cpu", threads=None, frames=40, repeats=3, prompt_rows=200,
        lm_config=configs[1], codec_config=configs[3], precisions="fp32")
    for key, value in zip(extra[::2], extra[1::2]):
        setattr(namespace, key.lstrip("-").replace("-", "_"), value if key in ("--device", "--precisions") else int(value))
    assert any(needle in problem for problem in reference.check_args(namespace))


def test_missing_reference_dir_and_configs_are_reported(monkeypatch):
    monkeypatch.delenv("MOSS_TTS_REFERENCE_DIR", raising=False)
    namespace = reference.argparse.Namespace(reference_dir=None, device="cpu", threads=None, frames=40, repeats=3,
                                             prompt_rows=200, lm_config=None, codec_config="/no/such.json",
                                             precisions="fp32")
    problems = reference.check_args(namespace)
    assert any("--reference-dir is required" in p for p in problems)
    assert any("--lm-config" in p for p in problems) and any("--codec-config" in p for p in problems)


def test_script_refuses_without_reference_dir(configs):
    env = {k: v for k, v in os.environ.items() if k != "MOSS_TTS_REFERENCE_DIR"}
    done = subprocess.run([sys.executable, "-m", "bench.engine.reference", *configs], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--reference-dir is required" in done.stderr


def test_locate_finds_each_part_and_skips_caches(tmp_path):
    root = _upstream_tree(tmp_path / "ref")
    cache = root / "lm" / ".cache" / "modules"
    cache.mkdir(parents=True)
    (cache / reference_upstream.LM_MARKER).write_text("# a copy HF's loader would leave\n")
    paths = reference_upstream.locate(root)
    assert (paths.lm, paths.codec, paths.runtime) == (root / "lm", root / "codec", root / "upstream")
    prints = reference_upstream.fingerprint(paths)
    assert set(prints) == {"lm/__init__.py", f"lm/{reference_upstream.LM_MARKER}", "codec/__init__.py",
                           f"codec/{reference_upstream.CODEC_MARKER}", "upstream/__init__.py",
                           f"upstream/{reference_upstream.RUNTIME_MARKER}"}
    assert prints["lm/__init__.py"] == prints["codec/__init__.py"] != prints[f"lm/{reference_upstream.LM_MARKER}"]


def test_locate_names_what_is_missing_or_doubled(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        reference_upstream.locate(tmp_path / "absent")
    root = _upstream_tree(tmp_path / "ref")
    (root / "codec" / reference_upstream.CODEC_MARKER).unlink()
    with pytest.raises(ValueError, match=f"no {reference_upstream.CODEC_MARKER}"):
        reference_upstream.locate(root)
    (root / "codec" / reference_upstream.CODEC_MARKER).write_text("")
    (root / "second").mkdir()
    (root / "second" / reference_upstream.RUNTIME_MARKER).write_text("")
    with pytest.raises(ValueError, match=f"2 copies of {reference_upstream.RUNTIME_MARKER}"):
        reference_upstream.locate(root)


def test_summary_ratios_and_record_shape(configs, tmp_path):
    assert reference.summarize([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    with pytest.raises(ValueError):
        reference.summarize([])
    runs = {"reference": [{"ttfp_ms": 900.0, "rtf": 3.0}, {"ttfp_ms": 1100.0, "rtf": 5.0}],
            "ours": [{"ttfp_ms": 400.0, "rtf": 1.5}, {"ttfp_ms": 600.0, "rtf": 2.5}],
            "ours_voice_cache": [{"ttfp_ms": 200.0, "rtf": 1.0}, {"ttfp_ms": 300.0, "rtf": 1.0}]}
    sides = {name: reference.side_summary(values) for name, values in runs.items()}
    assert sides["reference"]["ttfp_ms"] == {"median": 1000.0, "min": 900.0, "max": 1100.0, "n": 2}
    assert sides["ours"]["runs"] == runs["ours"]
    args = reference.parse_args([*configs, "--reference-dir", str(tmp_path), "--threads", "2"])
    record = reference.build_record(args, reference.machine_info("cpu"), {"timed": "x"}, sides)
    record = json.loads(json.dumps(record))  # what --json writes must round-trip
    assert record["ratios"]["reference_over_ours"] == {"ttfp_ms": 2.0, "rtf": 2.0}
    assert record["ratios"]["reference_over_ours_voice_cache"] == {"ttfp_ms": 4.0, "rtf": 4.0}
    assert record["settings"]["threads"] == 2 and record["settings"]["frames"] == 40
    machine = record["machine"]
    assert {"date", "cpu", "cpu_count", "torch", "transformers", "gpu"} <= set(machine)
    assert machine["gpu"] is None and machine["torch"] == torch.__version__
    table = reference.format_table(record)
    assert "| reference | 1000 (900-1100) | 4.000 (3.000-5.000) |" in table
    assert "reference_over_ours: TTFP x2.00, RTF x2.00" in table
    assert reference.ratios({"ours": sides["ours"]}) == {}


class _ReferenceShapedLM(torch.nn.Module):
    """Only what the wrappers touch on the reference LM: its config ids, a parameter for the
    device, and the continue/stop sampler (which here always picks the stop token)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = type("Config", (), {"audio_assistant_slot_token_id": 9, "audio_end_token_id": 7})()
        self.draws = 0

    def _sample_next_assistant_text_token(self, *, logits, **_):
        self.draws += 1
        return torch.full(logits.shape[:1], self.config.audio_end_token_id, dtype=torch.long)


def test_wrappers_feed_our_prompt_and_never_stop():
    lm = _ReferenceShapedLM()
    prompt = np.arange(5 * 17, dtype=np.int64).reshape(5, 17)
    reference_upstream._feed_prompt_and_never_stop(lm, prompt)
    ids, mask = lm.build_inference_input_ids(text="ignored", text_tokenizer=None, mode="continuation",
                                             prompt_text=None, prompt_audio_codes=None, device=torch.device("cpu"))
    assert ids.shape == (1, 5, 17) and ids.dtype == torch.long and torch.equal(ids[0], torch.from_numpy(prompt))
    assert mask.shape == (1, 5) and mask.dtype == torch.bool and bool(mask.all())
    tokens = lm._sample_next_assistant_text_token(logits=torch.zeros(3, 16384), do_sample=True, temperature=1.0)
    assert lm.draws == 1  # the draw is still made (its cost stays in the timing)
    assert tokens.tolist() == [9, 9, 9]


def test_stream_figures_rtf():
    fig = reference_upstream.StreamFigures(ttfp_s=0.5, elapsed_s=6.0, audio_s=3.0)
    assert fig.rtf == 2.0
