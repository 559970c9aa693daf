"""scripts/figures_deploy.py: the AoTI table shows a speed-up only where a compiled unit served."""

from __future__ import annotations

from support.figures import render_figures


def _record(date: str, units: dict[str, str]) -> dict:
    run = {"dtype": "fp32", "arch": "sm_90", "units": units, "unit_seconds": dict.fromkeys(units, 9.0),
           "build_s": 12.34, "frame_ms": {"eager": 15.0, "aoti": 10.0}, "speedup": 1.5,
           "codes_equal_share": 1.0, "codes_equal": True, "frames": 24, "repeats": 5}
    return {"kind": "aoti_step", "date": date, "command": "python -m bench.deploy.aoti_step", "runs": [run],
            "machine": {"cpu_model": "Xeon", "logical_cpus": 16, "usable_cpus": 16, "torch_threads": 16,
                        "ram_gib": 125.8, "gpus": ["NVIDIA H200"], "cuda": "13.0", "torch": "2.11.0"},
            "setup": {}, "args": {}}


def test_aoti_table_gives_a_speedup_only_where_a_package_served():
    render = render_figures()
    crashed = "eager: a separate process that loaded it exited with -11"
    text = render.render_aoti([("aoti-a.json", _record("2026-12-03T10:00:00Z", {"qkv": "compiled", "norm": "loaded"})),
                               ("aoti-b.json", _record("2026-12-03T11:00:00Z", {"qkv": crashed, "norm": crashed}))])
    served, fell_back = [line for line in text.splitlines() if line.startswith("| fp32")]
    assert "| 10.00 ms | 1.50× |" in served and "qkv: compiled, norm: loaded" in served and "12.3 s" in served
    assert "| – (no unit loaded) | – |" in fell_back and "1.50×" not in fell_back
    assert f"all 2: {crashed}" in fell_back
    assert text.index("aoti-a.json") < text.index("aoti-b.json")  # oldest first
