"""scripts/figures_serving.py: the GPU server block (targets, the search, the profiles) and the
side-by-side change table, rendered from records (fixtures built here, not measurements)."""

from __future__ import annotations

from support.figures import render_figures

render_serving = render_figures().render_serving
render_serving_changes = render_figures().render_serving_changes
render_serving_gpu = render_figures().render_serving_gpu


def _run(**figures) -> dict:
    run = {"x_realtime": 900.0, "rtf_max": 0.5, "behind_real_time": 0, "underruns": 0, "silence_s": 0.0,
           "ttfb_p50_ms": 120.0, "ttfb_p95_ms": 250.0, "server_cpu_s_per_audio_s": 0.004,
           "event_loop_s_per_audio_s": 0.0004, "pump_threads_s_per_audio_s": 0.001, "encode_s_per_audio_s": 0.002,
           "client_cores_busy": 1.5, "errors": 0, "holds": True}
    return {**run, **figures}


def _gpu_record() -> dict:
    inproc = {"x_realtime": 1000.0, "rtf_max": 0.16, "ttfp_p50_ms": 50.0, "ttfp_p95_ms": 200.0}
    return {
        "kind": "http_load", "date": "2026-12-03T10:00:00Z", "command": "python -m bench.http.load --fixture",
        "load_average_1m": 0.5, "notes": ["a fixture, not a measurement"], "complete": True,
        "args": {"repeats": 3},
        "machine": {"cpu_model": "Test CPU", "usable_cpus": 12, "logical_cpus": 16, "torch_threads": 12,
                    "ram_gib": 125.0, "gpus": ["Test GPU"], "cuda": "13.0", "torch": "2.11.0"},
        "setup": {"server": "python app.py, full-size random weights, cuda", "device": "cuda", "max_active_streams": 384,
                  "frames": 100, "client": "httpx.AsyncClient.stream", "client_processes": 4,
                  "cpus": {"clients": [12, 13, 14, 15], "server_and_inproc": list(range(12))},
                  "shared_machine": "nothing else ran on the machine"},
        "levels": [
            {"streams": 64, "inproc": inproc, "http": {"pcm/stream": _run(x_realtime=950.0), "mp3/stream": _run()}},
            {"streams": 256, "inproc": {**inproc, "x_realtime": 1500.0},
             "http": {"pcm/stream": _run(x_realtime=1200.0), "mp3/stream": _run(x_realtime=700.0)}},
        ],
        "search": {"target": {"ttfb_p95_ms": 300.0}, "formats": {
            "mp3": {"highest": 256, "first_failing": 320,
                    "levels": {"320": _run(behind_real_time=3, underruns=12, ttfb_p95_ms=410.0, holds=False)}},
            "pcm": {"highest": 384, "first_failing": None, "levels": {}}}},
        "profiles": {"256 mp3/stream": {"samples": 100, "roles": {"event loop": 0.2, "stream pumps": 0.5, "engine": 0.3},
                                        "top_frames": {"a (z.py:3)": 0.05, "encode (x.py:1)": 0.4,
                                                       "write (y.py:2)": 0.1}}},
    }


def test_the_gpu_block_states_the_targets_the_search_and_the_profiles() -> None:
    text = render_serving_gpu([("http-load-h200.json", _gpu_record())])
    assert text.startswith("**Server under load on the GPU.** Test CPU, 12 of 16 CPUs usable")
    assert "clients pinned to CPUs 12-15" in text and "Note: a fixture, not a measurement." in text
    assert ("- 256 streaming mp3 listeners: **0** behind real time, **0** underruns, TTFB p95 **250 ms** "
            "(target 0, 0, ≤ 300 ms).") in text
    assert "- 64 streams: HTTP pcm delivers **0.95×** the in-process figure (target ≥ 0.9)." in text
    assert "- 256 streams: HTTP pcm delivers **0.80×** the in-process figure (target ≥ 0.7)." in text
    assert "| mp3 | 256 | 320 | 3 / 12 / 410 / 0 |" in text and "| pcm | 384 | – | – |" in text
    assert "| 256 mp3/stream | 20% | 50% | 30% | 0% | `encode (x.py:1)` 40%; `write (y.py:2)` 10%; `a (z.py:3)` 5% |" in text
    assert "| 256 | mp3/stream | 700 | 0.58 | 0.47 |" in text


def test_gpu_and_cpu_records_go_to_their_own_blocks() -> None:
    gpu = ("http-load-h200.json", _gpu_record())
    assert render_serving([gpu]).startswith("Server load figures pending")
    assert render_serving_gpu([]).startswith("GPU server figures pending")


def test_the_change_table_lists_each_format_of_each_record() -> None:
    compare = {"server_cpu_s_per_audio_s": {"A": 0.02, "B": 0.018, "B_over_A": 0.9},
               "underruns": {"A": 4.0, "B": 0.0, "B_over_A": 0.0}, "ttfb_p95_ms": {"A": 100.0, "B": 120.0,
                                                                                   "B_over_A": 1.2}}
    record = {"kind": "http_ab", "date": "2026-12-03T10:00:00Z", "load_average_1m": 3.0, "load_average_1m_end": 4.0,
              "setup": {"label": "a change", "streams": 16}, "formats": {"mp3": {"compare": compare, "runs": {}}}}
    text = render_serving_changes([("http-ab-x.json", record)])
    assert "| a change | 16, mp3 | 0.90 | – | – | – | 4 → 0 | 100 → 120 | `http-ab-x.json`, load 3.0 → 4.0 |" in text
