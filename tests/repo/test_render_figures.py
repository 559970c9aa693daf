"""scripts/render_figures.py: the README and docs figures are rendered from benchmark records, the
same records always give the same text, and the committed documents match the committed records
(so a number typed into a figures block, or a record changed without re-rendering, fails here)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.figures import render_figures

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "figures"


render = render_figures()
BLOCKS = ("cpu-bench", "gpu-bench", "reliability")
TEMPLATE = "# Doc\n\n" + "".join(f"<!-- figures:{n}:start -->\nstale {n}\n<!-- figures:{n}:end -->\n\ntext\n"
                                  for n in BLOCKS)


def test_rendering_is_deterministic_and_idempotent():
    records = render.load_records(FIXTURES)
    assert [name for name, _ in records] == ["cpu-fp32.json", "gpu-graphed.json", "reliability.json"]
    blocks = render.render_blocks(records)
    assert blocks == render.render_blocks(render.load_records(FIXTURES))
    once = render.render_document(TEMPLATE, BLOCKS, blocks)
    assert "stale" not in once and once.endswith("text\n")
    assert render.render_document(once, BLOCKS, blocks) == once


def test_engine_table_states_machine_date_and_the_spread_of_runs():
    cpu = render.render_blocks(render.load_records(FIXTURES))["cpu-bench"]
    lines = cpu.splitlines()
    assert lines[0].startswith("**float32 LM, fp32 codec.** Test CPU, 2 of 2 CPUs usable, 1 torch thread, 8 GiB RAM")
    assert "run 2026-01-02 03:04 UTC (load average 1.5 at the start)" in lines[0]
    assert "`bench/results/cpu-fp32.json`" in lines[0]
    assert lines[0].endswith("Note: a fixture, not a measurement.")
    assert lines[1] == ("40 frames per stream, 200-row voice-clone prompt, default sampling; "
                        "median of 3 runs (min–max) after one warm-up run.")
    assert "| 1 | 342 (330–361) | 350 | 1.781 (1.700–1.850) | 1.781 | 0.56 (0.54–0.59) | 847 MiB RSS (+96) |" in lines
    assert "| 2 | 578 | 600 | 2.900 (2.800–3.000) | 3.100 | 0.69 (0.66–0.71) | 941 MiB RSS (+40) |" in lines
    assert "Per frame (eager, batch 1, `--components`): prefill 940 ms, LM frame 91.2 ms, codec frame 25.1 ms." in lines


def test_gpu_block_keeps_graphed_and_eager_side_by_side():
    gpu = render.render_blocks(render.load_records(FIXTURES))["gpu-bench"]
    assert "Test GPU (CUDA 12.8)" in gpu and "LM step compile: inductor" in gpu
    assert "| graphed | 1 | 12.1 (12.0–12.4) | 12.2 | 0.041 (0.040–0.042) | 0.041 | 24.2 (23.5–24.9) | 458 MiB GPU (+80) |" in gpu
    assert "Graphed / eager (medians, side by side in this run): streams 1: RTF 0.18, TTFP 0.42." in gpu


def test_without_gpu_records_the_gpu_block_says_pending(tmp_path):
    shutil.copy(FIXTURES / "cpu-fp32.json", tmp_path)
    blocks = render.render_blocks(render.load_records(tmp_path))
    assert blocks["gpu-bench"].startswith("GPU figures pending: no CUDA benchmark record")
    assert blocks["reliability"].startswith("Reliability figures pending")
    assert blocks["cpu-bench"].startswith("**float32 LM")


def test_a_missing_or_doubled_marker_is_an_error():
    with pytest.raises(ValueError, match="figures:gpu-bench:start"):
        render.replace_block("no markers here", "gpu-bench", "body")
    twice = "<!-- figures:x:start -->\n<!-- figures:x:end -->\n" * 2
    with pytest.raises(ValueError, match="figures:x:start"):
        render.replace_block(twice, "x", "body")


def test_committed_documents_match_the_committed_records():
    assert render.main(["--check"]) == 0, "the README / docs figures differ from bench/results"


def test_a_typed_number_in_a_figures_block_is_caught(tmp_path):
    for relative in render.DOCUMENTS:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / relative, tmp_path / relative)
    assert render.main(["--check", "--root", str(tmp_path)]) == 0
    readme = tmp_path / "docs" / "PERFORMANCE.md"
    marker = "<!-- figures:cpu-bench:start -->\n"
    readme.write_text(readme.read_text().replace(marker, marker + "| fp32 | 1 | 342 ms | 1.78 |\n"))  # pasted
    assert render.main(["--check", "--root", str(tmp_path)]) == 1
    assert render.main(["--root", str(tmp_path)]) == 0  # rendering repairs it
    assert readme.read_text() == (REPO_ROOT / "docs" / "PERFORMANCE.md").read_text()


def test_reliability_tables_come_from_the_record():
    text = render.render_blocks(render.load_records(FIXTURES))["reliability"]
    assert text.startswith("**Reliability.** Test CPU, 2 of 2 CPUs usable, 1 torch thread")
    assert ("| left while queued | 6 (+4 holding the slots) | – | – | 6 gave up after 0.5 s | 2 still queued right "
            "after they left, none 0.12 s later (slots still held); engine idle afterwards |") in text
    assert "| resident memory, soak (after a 30-request warm-up) | 478.6 MiB | 478.7 MiB (+0.02 %) |" in text


def test_precision_and_reference_tables_name_their_figures():
    fidelity = {"kind": "fidelity", "command": "python -m bench.engine.fidelity --device cpu", "date": "2026-01-02T03:04:05Z",
                "machine": {"cpu_model": "Test CPU", "usable_cpus": 2, "torch": "2.13.0", "gpus": []},
                "setup": {"device": "cpu", "frames": 12},
                "modes": {"fp16": {"parity": {"top1_agreement": 1.0, "codebook0_agreement": 1.0, "max_abs_dlogit": 0.05,
                                              "logit_scale": 39.0, "codec_snr_db": 60.45, "frames": 12},
                                   "full-size random": {"top1_agreement": 0.9875, "codebook0_agreement": 1.0,
                                                        "max_abs_dlogit": 0.036, "logit_scale": 141.0,
                                                        "codec_snr_db": 64.1, "frames": 12},
                                   "speed": {"lm_frame_ms": 24.43, "codec_frame_ms": 16.3}},
                          "fp32": {"speed": {"lm_frame_ms": 98.8, "codec_frame_ms": 31.3}}}}
    table = render.render_precision([("fidelity-cpu.json", fidelity)])
    assert "**CPU weight modes.** Test CPU, 2 CPUs, torch 2.13.0; run 2026-01-02 03:04 UTC" in table
    assert "| fp32 (bit-faithful) | 100 % (itself) | 0 | exact | 98.8 ms | 31.3 ms |" in table
    assert "| fp16 weights, fp32 math | 100.0 % / 98.8 % | 0.05 / 0.036 (141) | 60.5 dB | 24.4 ms | 16.3 ms |" in table
    assert table.index("fp32 (bit-faithful)") < table.index("fp16 weights")
    reference = {"kind": "reference_side_by_side",
                 "machine": {"date": "2026-01-02T03:04:05+00:00", "cpu": "Test CPU", "cpus_usable": 2, "torch": "2.13.0"},
                 "settings": {"device": "cpu", "threads": 1, "frames": 40, "repeats": 3, "prompt_rows": 200,
                              "sampling": "upstream defaults"},
                 "sides": {"reference": {"ttfp_ms": {"median": 600, "min": 590, "max": 610},
                                         "rtf": {"median": 2.3, "min": 2.2, "max": 2.4}},
                           "ours_int8_voice_cache": {"ttfp_ms": {"median": 92, "min": 90, "max": 94},
                                                     "rtf": {"median": 0.44, "min": 0.43, "max": 0.45}}},
                 "ratios": {"reference_over_ours_int8_voice_cache": {"ttfp_ms": 6.52, "rtf": 5.23}}}
    table = render.render_reference([("reference-cpu.json", reference)])
    assert "**CPU, 1 torch thread.** Test CPU, 2 CPUs, torch 2.13.0; run 2026-01-02 03:04 UTC" in table
    assert "| ours, int8 weights, voice prefix reused | 92 (90–94) | 0.440 (0.430–0.450) | 6.5×, 5.2× |" in table
    assert "| reference implementation (upstream) | 600 (590–610) | 2.300 (2.200–2.400) | – |" in table


def test_readme_is_short_and_its_headline_is_the_newest_main_record():
    readme = (REPO_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200  # a README people read; the figures live in docs/
    records = render.load_records(FIXTURES)
    headline = render.render_blocks(records)["headline"].splitlines()
    assert "| 342 ms, RTF 1.781 |" in headline[2] and "`cpu-fp32.json`" in headline[2]
    assert "12.1 ms, RTF 0.041" in headline[3] and "`gpu-graphed.json`" in headline[3]
    # Without a one-stream row a record is not the one-stream figure (nothing else is "measured").
    gpu = [(n, r) for n, r in records if n == "gpu-graphed.json"]
    without_one = [(n, {**r, "modes": {m: [x for x in rows if x["streams"] != 1] for m, rows in r["modes"].items()}})
                   for n, r in gpu]
    assert "| GPU | not measured |" in render.render_headline(without_one)


def test_a_cpu_record_listing_the_gpu_only_features_as_off_is_still_the_main_one():
    """The bench records the engine's features as they ran: on a CPU the GPU-only ones are off, which
    is how a CPU runs, not a switch turned off (on a GPU it would be)."""
    records = [(n, r) for n, r in render.load_records(FIXTURES) if n == "cpu-fp32.json"]
    setup = {**records[0][1]["setup"], "fused_kernels": False, "step_ahead": False, "split_readout": False}
    as_run = [(n, {**r, "setup": setup}) for n, r in records]
    assert "| 342 ms, RTF 1.781 |" in render.render_headline(as_run).splitlines()[2]
    on_gpu = [(n, {**r, "setup": {**setup, "device": "cuda"}}) for n, r in records]
    assert "| GPU | not measured |" in render.render_headline(on_gpu)
