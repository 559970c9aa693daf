"""Renderer of `scripts/render_figures.py` for the server load bench (`bench/http/load.py`) and the
side-by-side change checks (`bench/http/ab.py`): docs/SERVING.md's `serving` (CPU), `serving-gpu`,
`serving-changes`, `serving-encoder-pool` (a record of `--encoder-processes` settings side by
side) and `serving-trace` (records of `--trace`: where a request's time goes) blocks."""

from __future__ import annotations

from figures_common import _caption


def _x(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.2f}"


def _num(value, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _on_gpu(record: dict) -> bool:
    return bool(record["machine"].get("gpus")) and record["setup"].get("device", "cpu") != "cpu"


def _cpu_cell(run: dict) -> str:
    total = _num(run.get("server_cpu_s_per_audio_s"), ".3f")
    if run.get("event_loop_s_per_audio_s") is None:
        return total
    return f"{total} ({run['event_loop_s_per_audio_s']:.4f} / {run['pump_threads_s_per_audio_s']:.4f})"


def _level_rows(level: dict) -> list[str]:
    inproc = level["inproc"]
    pcm = level["http"].get("pcm/stream", {}).get("x_realtime")
    rows = []
    if inproc:
        rows.append(f"| {level['streams']} | in-process `Synthesizer.stream()` | {_x(inproc['x_realtime'])} | – | 1.00 | "
                    f"{inproc['rtf_max']:.2f} | – | – | {inproc['ttfp_p50_ms']:.0f} / {inproc['ttfp_p95_ms']:.0f} "
                    "(first audio) | – | – | – |")
    for key, run in sorted(level["http"].items(), key=lambda kv: (kv[0].split("/")[1], kv[0])):
        busy = run.get("client_cores_busy")
        rows.append(
            f"| {level['streams']} | {key} | {_x(run['x_realtime'])} | {_ratio(run['x_realtime'], pcm)} | "
            f"{_ratio(run['x_realtime'], inproc['x_realtime'] if inproc else None)} | {_num(run['rtf_max'], '.2f')} | "
            f"{run['behind_real_time']:.0f} of {level['streams']} | {run['underruns']:.0f} ({run['silence_s']:.1f} s) | "
            f"{_num(run['ttfb_p50_ms'], '.0f')} / {_num(run['ttfb_p95_ms'], '.0f')} | {_cpu_cell(run)} | "
            f"{_num(run.get('encode_s_per_audio_s'), '.4f')} | {_num(busy, '.2f')} |")
    return rows


def _http(record: dict, streams: int, key: str, figure: str):
    level = next((lv for lv in record["levels"] if lv["streams"] == streams), {})
    return level.get("http", {}).get(key, {}).get(figure)


def _inproc(record: dict, streams: int):
    level = next((lv for lv in record["levels"] if lv["streams"] == streams), {})
    return (level.get("inproc") or {}).get("x_realtime")


def _cpu_targets(record: dict) -> list[str]:
    lines = []
    mp3, pcm = _http(record, 32, "mp3/stream", "x_realtime"), _http(record, 32, "pcm/stream", "x_realtime")
    if mp3 and pcm:
        lines.append(f"- 32 streams: mp3 delivers **{mp3 / pcm:.2f}×** pcm's aggregate (target ≥ 0.6).")
    if _http(record, 16, "mp3/stream", "behind_real_time") is not None:
        lines.append(f"- 16 mp3 streams: **{_http(record, 16, 'mp3/stream', 'behind_real_time'):.0f}** listeners behind "
                     f"real time, {_http(record, 16, 'mp3/stream', 'underruns'):.0f} underruns in the playback "
                     "simulation (target 0).")
    if _http(record, 64, "pcm/stream", "x_realtime") and _inproc(record, 64):
        lines.append(f"- 64 streams: HTTP pcm delivers **{_http(record, 64, 'pcm/stream', 'x_realtime') / _inproc(record, 64):.2f}×**"
                     " the in-process figure (target ≥ 0.9).")
    return lines


def _gpu_targets(record: dict) -> list[str]:
    lines = []
    if _http(record, 256, "mp3/stream", "behind_real_time") is not None:
        lines.append(f"- 256 streaming mp3 listeners: **{_http(record, 256, 'mp3/stream', 'behind_real_time'):.0f}** "
                     f"behind real time, **{_http(record, 256, 'mp3/stream', 'underruns'):.0f}** underruns, TTFB p95 "
                     f"**{_num(_http(record, 256, 'mp3/stream', 'ttfb_p95_ms'), '.0f')} ms** (target 0, 0, ≤ 300 ms).")
    for streams, target in ((64, 0.9), (256, 0.7)):
        pcm, inproc = _http(record, streams, "pcm/stream", "x_realtime"), _inproc(record, streams)
        if pcm and inproc:
            lines.append(f"- {streams} streams: HTTP pcm delivers **{pcm / inproc:.2f}×** the in-process figure "
                         f"(target ≥ {target:g}).")
    return lines


def _search(record: dict) -> list[str]:
    found = record.get("search")
    if not found:
        return []
    target = found["target"]
    lines = [f"Most listeners per format that hold the target (every listener: no error, ahead of real time, no "
             f"underrun; TTFB p95 ≤ {target['ttfb_p95_ms']:.0f} ms; every repeat), levels tried in order until one "
             "fails:", "", "| format | most listeners that hold | first level that fails | there: behind / underruns / "
             "TTFB p95 ms / errors |", "|---|---|---|---|"]
    for fmt, entry in found["formats"].items():
        failing = entry.get("first_failing")
        why = "–"
        if failing is not None:
            run = entry["levels"][str(failing)]
            why = (f"{run['behind_real_time']:.0f} / {run['underruns']:.0f} / {_num(run['ttfb_p95_ms'], '.0f')} / "
                   f"{run['errors']:.0f}")
        stopped = " (budget ran out)" if entry.get("stopped") else ""
        lines.append(f"| {fmt} | {entry['highest'] or 'none tried held'}{stopped} | {failing or '–'} | {why} |")
    return lines


def _profiles(record: dict) -> list[str]:
    profiles = {k: v for k, v in (record.get("profiles") or {}).items() if v.get("samples")}
    if not profiles:
        return []
    lines = ["Where the server's time went in extra runs with py-spy recording it (share of active samples "
             "per thread; the three frames with most samples):", "",
             "| run | event loop | stream pumps | engine | other | top frames |", "|---|---|---|---|---|---|"]
    for key, entry in profiles.items():
        roles = entry["roles"]
        top = sorted(entry["top_frames"].items(), key=lambda kv: -kv[1])[:3]  # records keep keys sorted by name
        frames = "; ".join(f"`{frame}` {share:.0%}" for frame, share in top)
        lines.append(f"| {key} | " + " | ".join(f"{roles.get(role, 0):.0%}" for role in
                                                ("event loop", "stream pumps", "engine", "other")) + f" | {frames} |")
    return lines


def _load_table(record: dict, source: str, title: str, targets: list[str]) -> list[str]:
    setup = record["setup"]
    client = setup["client"] + (f", {setup['client_processes']} processes" if setup.get("client_processes") else "")
    cpus = setup.get("cpus") or {}
    pinned = (f"; clients pinned to CPUs {cpus['clients'][0]}-{cpus['clients'][-1]}, the server and the in-process "
              "engine to the others" if cpus.get("clients") else "")
    lines = [
        _caption(title, record, source),
        f"{setup['server']}, `--max-active-streams {setup['max_active_streams']}`, {setup['frames']} frames "
        f"({setup['frames'] * 0.08:g} s) per request; clients: {client}, on the same machine{pinned}. "
        f"{setup['shared_machine'].capitalize()}. Median of {record['args']['repeats']} runs per row.",
        "",
        "| streams | path | × real time | vs pcm | vs in-process | RTF max | behind real time | underruns (silence) "
        "| TTFB p50 / p95 ms | server CPU s per audio s (event loop / pumps) | encode s per audio s | clients' cores "
        "busy |",
        "|---" * 12 + "|",
    ]
    for level in record["levels"]:
        lines += _level_rows(level)
    if targets:
        lines += ["", "Against the serving targets (issues 33 and 47):", "", *targets]
    search = _search(record)
    if search:
        lines += ["", *search]
    profiles = _profiles(record)
    if profiles:
        lines += ["", *profiles]
    if not record.get("complete", True):
        lines += ["", "This run stopped before its end (its time budget): the rows above are what it measured."]
    return lines


def _encoders(check: dict) -> list[str]:
    lines = [f"Encoders on {check['audio_s']:.0f} s of real speech (two preset clips, 48 kHz stereo, one thread, "
             "best of 3; quality against the source after decoding):", "",
             "| encoder | CPU s per audio s | SNR dB | mel-band distance dB |", "|---|---|---|---|"]
    for fmt, row in check["served"].items():
        options = ", ".join(f"{k} {v}" for k, v in row["settings"]["codec_options"].items())
        name = f"{fmt} as served ({row['settings']['codec']}{', ' + options if options else ''}, {row['kbit_s']} kbit/s)"
        lines.append(f"| {name} | {row['cpu_s_per_audio_s']:.4f} | {row.get('snr_db', '–')} | {row.get('mel_db', '–')} |")
    for level, row in check["lame_levels"].items():
        lines.append(f"| libmp3lame quality level {level}{' (LAME default)' if level == '3' else ''}, "
                     f"{check['lame_bit_rate'] // 1000} kbit/s | {row['cpu_s_per_audio_s']:.4f} | {row['snr_db']} | "
                     f"{row['mel_db']} |")
    return lines


def _pool_record(record: dict) -> bool:
    return bool(record["setup"].get("encoder_processes"))


def _traced(record: dict) -> bool:
    return bool(record["args"].get("trace"))


def render_serving(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "http_load" and not _on_gpu(r) and not _pool_record(r)
              and not _traced(r)]
    if not chosen:
        return "Server load figures pending: no record in `bench/results/` yet (`python -m bench.http.load`)."
    source, record = max(chosen, key=lambda sr: sr[1]["date"])
    lines = _load_table(record, source, "Server under load", _cpu_targets(record))
    encoders = [(s, r) for s, r in records if r.get("kind") == "encoder_check"]
    if encoders:  # the encoders' own record: their speed, quality and the interpreter lock
        enc_source, enc = max(encoders, key=lambda sr: sr[1]["date"])
        gil = enc["gil_progress_beside_encoder"]
        lines += ["", _caption("Encoders", enc, enc_source), "", *_encoders(enc["encoders"]), "",
                  "A pure Python thread beside a thread that encodes non-stop keeps this share of its speed alone "
                  "(median of 5 one-second pairs; 1 = the encoder never holds the interpreter lock, 0.5 or less = "
                  "it holds it): " + ", ".join(f"{fmt} {value:.2f}" for fmt, value in gil.items()) + "."]
    elif record.get("encoder_check"):
        lines += ["", *_encoders(record["encoder_check"])]
    return "\n".join(lines)


def render_serving_gpu(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "http_load" and _on_gpu(r) and not _pool_record(r)
              and not _traced(r)]
    if not chosen:
        return ("GPU server figures pending: no GPU record of `bench/http/load.py` in `bench/results/` yet "
                "(`bash bench/http/device_load.sh` on the H200; see above).")
    source, record = max(chosen, key=lambda sr: sr[1]["date"])
    return "\n".join(_load_table(record, source, "Server under load on the GPU", _gpu_targets(record)))


def render_serving_changes(records: list[tuple[str, dict]]) -> str:
    chosen = sorted(((s, r) for s, r in records if r.get("kind") == "http_ab"), key=lambda sr: sr[1]["date"])
    if not chosen:
        return "No side-by-side change record yet (`python -m bench.http.ab`)."
    lines = ["| change (B against A) | streams, format | server CPU s per audio s, B / A | event loop | pumps | "
             "× real time | underruns A → B | TTFB p95 ms A → B | record |", "|---" * 9 + "|"]
    for source, record in chosen:
        setup = record["setup"]
        for fmt, entry in record["formats"].items():
            c = entry["compare"]

            def ratio(key: str, c: dict = c) -> str:
                return _num(c.get(key, {}).get("B_over_A"), ".2f")

            def pair(key: str, fmt_: str, c: dict = c) -> str:
                got = c.get(key)
                return "–" if not got else f"{got['A']:{fmt_}} → {got['B']:{fmt_}}"

            lines.append(f"| {setup['label']} | {setup['streams']}, {fmt} | {ratio('server_cpu_s_per_audio_s')} | "
                         f"{ratio('event_loop_s_per_audio_s')} | {ratio('pump_threads_s_per_audio_s')} | "
                         f"{ratio('x_realtime')} | {pair('underruns', '.0f')} | {pair('ttfb_p95_ms', '.0f')} | "
                         f"`{source}`, load {record['load_average_1m']:.1f} → {record['load_average_1m_end']:.1f} |")
    return "\n".join(lines)


def _pool_row(streams: int, key: str, run: dict, pcm: float | None) -> str:
    fmt, _, processes = key.partition(" enc=")
    return (f"| {streams} | {fmt.split('/')[0]} | {processes} | {_x(run['x_realtime'])} | "
            f"{_ratio(run['x_realtime'], pcm)} | {_num(run['rtf_max'], '.2f')} | "
            f"{run['behind_real_time']:.0f} of {streams} | {run['underruns']:.0f} | "
            f"{_num(run['ttfb_p50_ms'], '.0f')} / {_num(run['ttfb_p95_ms'], '.0f')} | "
            f"{_num(run.get('server_cpu_s_per_audio_s'), '.3f')} ({_num(run.get('encoder_processes_s_per_audio_s'), '.3f')}) |")


def render_serving_encoder_pool(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "http_load" and _pool_record(r) and not _traced(r)]
    if not chosen:
        return "No encoder-pool record yet (`python -m bench.http.load --encoder-processes 1,0`)."
    source, record = max(chosen, key=lambda sr: sr[1]["date"])
    setup = record["setup"]
    lines = [_caption("Encoder processes side by side", record, source),
             f"{setup['server']}: one server per `--encoder-processes` setting "
             f"({', '.join(map(str, setup['encoder_processes']))}), the cases run on each in turn within a repeat; "
             f"{setup['frames']} frames ({setup['frames'] * 0.08:g} s) per request. "
             f"{setup['shared_machine'].capitalize()}. Median of {record['args']['repeats']} runs per row.", "",
             "| streams | format | encoder processes | × real time | vs pcm (same setting) | RTF max | behind real time "
             "| underruns | TTFB p50 / p95 ms | server CPU s per audio s (encoder processes) |", "|---" * 10 + "|"]
    targets = []
    for level in record["levels"]:
        http, streams = level["http"], level["streams"]
        for key in sorted(http, key=lambda k: (k.split(" enc=")[0].split("/")[0] != "mp3", k)):
            pcm_key = "pcm/stream" + key.partition("/stream")[2]
            lines.append(_pool_row(streams, key, http[key], http.get(pcm_key, {}).get("x_realtime")))
        for n in setup["encoder_processes"]:
            mp3, pcm = http.get(f"mp3/stream enc={n}"), http.get(f"pcm/stream enc={n}")
            if streams == 32 and mp3 and pcm:
                targets.append(f"- 32 streams, {n} encoder processes: mp3 delivers "
                               f"**{mp3['x_realtime'] / pcm['x_realtime']:.2f}×** pcm's aggregate (target ≥ 0.6).")
            if streams == 16 and mp3:
                targets.append(f"- 16 mp3 streams, {n} encoder processes: **{mp3['behind_real_time']:.0f}** listeners "
                               f"behind real time, {mp3['x_realtime']:.1f}× real time in all (target: none behind).")
    if targets:
        lines += ["", "Against the serving targets (issues 33 and 47):", "", *targets]
    return "\n".join(lines)


def _p(figure: dict | None, key: str = "p50") -> str:
    return "–" if not figure else f"{figure[key]:.0f}"


def _per_call(engine: dict, thread: str, label: str) -> str:
    call = engine.get("host", {}).get(thread, {}).get(label)
    return "–" if not call or not call["count"] else f"{call['total_ms'] / call['count']:.1f}"


def _trace_row(streams: int, key: str, run: dict) -> str:
    trace = run.get("trace") or {}
    engine = trace.get("engine", trace)
    waves = engine.get("admissions_ms_count") or []
    busy = (engine.get("device") or {}).get("any", {}).get("share_of_wall")
    if "requests" not in trace:  # the in-process engine: no HTTP phases
        phases = "– | – | " + f"{_num(run.get('ttfp_p50_ms'), '.0f')} / {_num(run.get('ttfp_p95_ms'), '.0f')} | – | – | – | –"
    else:
        phases = " | ".join(f"{_p(trace.get(name))} / {_p(trace.get(name), 'p95')}" for name in (
            "entered_after_first_ms", "submitted_after_entered_ms", "engine_first_audio_after_submitted_ms",
            "first_chunk_ready_after_first_audio_ms", "first_bytes_after_first_ready_ms"))
        phases += (f" | {_num(run.get('ttfb_p50_ms'), '.0f')} / {_num(run.get('ttfb_p95_ms'), '.0f')} | "
                   f"{_p(trace.get('loop_lag_ms'), 'p95')} / {_p(trace.get('loop_lag_ms'), 'max')}")
    return (f"| {streams} | {key} | {_x(run['x_realtime'])} | {phases} | {len(waves)} "
            f"({', '.join(str(n) for _, n in waves[:4])}{', …' if len(waves) > 4 else ''}) | "
            f"{_per_call(engine, 'engine', 'launch')} | {_per_call(engine, 'codec', 'decode')} | "
            f"{_num(busy, '.0%')} |")


def render_serving_trace(records: list[tuple[str, dict]]) -> str:
    chosen = sorted(((s, r) for s, r in records if r.get("kind") == "http_load" and _traced(r)),
                    key=lambda sr: sr[1]["date"])
    if not chosen:
        return "No traced load record yet (`python -m bench.http.load --trace`)."
    lines: list[str] = []
    for source, record in chosen:
        setup = record["setup"]
        lines += [_caption("Where a request's time goes", record, source),
                  f"{setup['server']}, {setup['frames']} frames ({setup['frames'] * 0.08:g} s) per request, the server "
                  f"traced (`bench/http/traced.py`) and the in-process engine too. {setup['shared_machine'].capitalize()}. "
                  f"Timeline figures: the first run of each row (over its listeners); × real time: the median of "
                  f"{record['args']['repeats']} run{'s' if record['args']['repeats'] > 1 else ''}; device busy: share "
                  "of the run's window (the clients' common start, 0.5 s, included; in-process: none).", "",
                  "| streams | path | × real time | requests in, after the first (ms, p50 / p95) | submitted, after in "
                  "| engine's first audio, after submitted (in-process: TTFP) | first chunk's bytes ready, after first "
                  "audio | first bytes sent, after ready | client TTFB p50 / p95 | event loop lag p95 / max ms | "
                  "admission waves (streams) | engine: ms per LM launch | codec: ms per decode call | device busy |",
                  "|---" * 14 + "|"]
        for level in record["levels"]:
            if level["inproc"]:
                lines.append(_trace_row(level["streams"], "in-process", level["inproc"]))
            for key, run in sorted(level["http"].items()):
                lines.append(_trace_row(level["streams"], key, run))
        lines.append("")
    return "\n".join(lines[:-1])
