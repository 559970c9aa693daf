"""Renderer of `scripts/render_figures.py` for the server load bench (`bench/http_load.py`):
docs/SERVING.md's `serving` block."""

from __future__ import annotations

from figures_common import _caption


def _x(value: float | None) -> str:
    return "–" if value is None else (f"{value:.1f}" if value >= 10 else f"{value:.2f}")


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.2f}"


def _level_rows(level: dict) -> list[str]:
    inproc = level["inproc"]
    pcm = level["http"].get("pcm/stream", {}).get("x_realtime")
    rows = [f"| {level['streams']} | in-process `Synthesizer.stream()` | {_x(inproc['x_realtime'])} | – | 1.00 | "
            f"{inproc['rtf_max']:.2f} | – | – | {inproc['ttfp_p50_ms']:.0f} / {inproc['ttfp_p95_ms']:.0f} (first audio) "
            "| – | – |"]
    for key, run in sorted(level["http"].items(), key=lambda kv: (kv[0].split("/")[1], kv[0])):
        encode = run.get("encode_s_per_audio_s")
        rows.append(
            f"| {level['streams']} | {key} | {_x(run['x_realtime'])} | {_ratio(run['x_realtime'], pcm)} | "
            f"{_ratio(run['x_realtime'], inproc['x_realtime'])} | {run['rtf_max']:.2f} | "
            f"{run['behind_real_time']:.0f} of {level['streams']} | {run['underruns']:.0f} ({run['silence_s']:.1f} s) | "
            f"{run['ttfb_p50_ms']:.0f} / {run['ttfb_p95_ms']:.0f} | {run['server_cpu_s_per_audio_s']:.3f} | "
            f"{'–' if encode is None else f'{encode:.4f}'} |")
    return rows


def _targets(record: dict) -> list[str]:
    by_streams = {level["streams"]: level for level in record["levels"]}

    def http(streams: int, key: str, figure: str):
        return by_streams.get(streams, {}).get("http", {}).get(key, {}).get(figure)

    lines = []
    if http(32, "mp3/stream", "x_realtime") and http(32, "pcm/stream", "x_realtime"):
        ratio = http(32, "mp3/stream", "x_realtime") / http(32, "pcm/stream", "x_realtime")
        lines.append(f"- 32 streams: mp3 delivers **{ratio:.2f}×** pcm's aggregate (target ≥ 0.6).")
    if http(16, "mp3/stream", "behind_real_time") is not None:
        lines.append(f"- 16 mp3 streams: **{http(16, 'mp3/stream', 'behind_real_time'):.0f}** listeners behind real "
                     f"time, {http(16, 'mp3/stream', 'underruns'):.0f} underruns in the playback simulation (target 0).")
    if http(64, "pcm/stream", "x_realtime") and 64 in by_streams:
        ratio = http(64, "pcm/stream", "x_realtime") / by_streams[64]["inproc"]["x_realtime"]
        lines.append(f"- 64 streams: HTTP pcm delivers **{ratio:.2f}×** the in-process figure (target ≥ 0.9).")
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


def render_serving(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "http_load"]
    if not chosen:
        return "Server load figures pending: no record in `bench/results/` yet (`python bench/http_load.py`)."
    source, record = max(chosen, key=lambda sr: sr[1]["date"])
    setup = record["setup"]
    lines = [
        _caption("Server under load", record, source),
        f"{setup['server']}, `--max-active-streams {setup['max_active_streams']}`, "
        f"`MOSS_TTS_NUM_THREADS={setup['threads']}`, {setup['frames']} frames ({setup['frames'] * 0.08:g} s) per "
        f"request; clients: {setup['client']}, on the same machine. {setup['shared_machine'].capitalize()}: "
        "absolute figures move with that load, the ratios are taken between runs of the same minutes. Median of "
        f"{record['args']['repeats']} runs per row.",
        "",
        "| streams | path | × real time | vs pcm | vs in-process | RTF max | behind real time | underruns (silence) "
        "| TTFB p50 / p95 ms | server CPU s per audio s | encode s per audio s |",
        "|---" * 11 + "|",
    ]
    for level in record["levels"]:
        lines += _level_rows(level)
    targets = _targets(record)
    if targets:
        lines += ["", "Against the targets of issue 33 (this machine, tiny checkpoints):", "", *targets]
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
