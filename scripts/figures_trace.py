"""The engine-trace table of `scripts/render_figures.py` (records of `bench/engine/trace.py`)."""

from __future__ import annotations

from figures_common import _caption, _ms, _times


def _runs_per_level(runs: list[dict]) -> str:
    most = max(sum(1 for r in runs if r["streams"] == level) for level in {r["streams"] for r in runs})
    return "one traced run per level" if most == 1 else f"{most} traced runs per level (each shown)"


def _staggered(record: dict) -> bool:
    return any(r.get("arrival_gap_ms") for r in record["runs"])


def render_trace(records: list[tuple[str, dict]]) -> str:
    """The newest trace of requests arriving all at once (the bench's levels)."""
    chosen = sorted(((s, r) for s, r in records if r.get("kind") == "engine_trace" and not _staggered(r)),
                    key=lambda sr: sr[1]["date"])
    if not chosen:
        return "No engine trace yet: `python -m bench.engine.trace --json bench/results/engine-trace-h200.json` on a GPU."
    source, record = chosen[-1]
    runs = record["runs"]
    lines = [_caption("Engine trace", record, source),
             f"{_runs_per_level(runs)}, server defaults ({record['setup']['context_rows']}-row KV context); "
             "the tracing's own cost is in these figures.", "",
             "| streams | wall (ms) | × real time | TTFP p50 / p95 (ms) | admitted (ms after the start: streams) "
             "| prompt building per request (median ms) | burst prefill (ms) | device busy (share of wall) "
             "| LM / codec busy (ms) | readout after the device (p50 / p95 ms) |",
             "|---" * 10 + "|"]
    for r in runs:
        engine, device = r["host"].get("engine", {}), r["device"]
        prefill = engine.get("prefill", {})
        readout = r.get("readout_after_device_ms") or {}
        waves = ", ".join(f"{t:.0f}: {n}" for t, n in r["admissions_ms_count"])
        lines.append(f"| {r['streams']} | {r['wall_ms']:.0f} | {_times(r['x_realtime'])} | "
                     f"{_ms(r['ttfp_p50_ms'])} / {_ms(r['ttfp_p95_ms'])} | {waves} | "
                     f"{engine.get('prepare', {}).get('median_ms', float('nan')):.2f} | "
                     f"{prefill.get('total_ms', 0):.1f} ({prefill.get('count', 0)} pass) | "
                     f"{device['any']['busy_ms']:.0f} ({100 * device['any']['share_of_wall']:.0f} %) | "
                     f"{device['lm']['busy_ms']:.0f} / {device['codec']['busy_ms']:.0f} | "
                     f"{readout.get('p50', float('nan')):.1f} / {readout.get('p95', float('nan')):.1f} |")
    return "\n".join(lines)


def render_arrivals(records: list[tuple[str, dict]]) -> str:
    """Traces that spread the requests' arrivals (`--arrival-gaps-ms`): each such record's runs,
    oldest record first, so a change to the engine shows as before and after."""
    chosen = sorted(((s, r) for s, r in records if r.get("kind") == "engine_trace" and _staggered(r)),
                    key=lambda sr: sr[1]["date"])
    if not chosen:
        return ("No trace with spread-out arrivals yet: `python -m bench.engine.trace --streams 256 "
                "--arrival-gaps-ms 0,4 --json F` on a GPU.")
    lines = []
    for source, record in chosen:
        lines += [_caption("Arrivals spread out", record, source), "",
                  "| streams | arrivals | wall (ms) | × real time | RTF p50 | TTFP p50 / p95 (ms) "
                  "| codec passes | codec busy (ms) | LM busy (ms) | LM steps |", "|---" * 10 + "|"]
        for r in record["runs"]:
            gap = r.get("arrival_gap_ms") or 0
            codec, lm = r["device"].get("codec", {}), r["device"].get("lm", {})
            lines.append(f"| {r['streams']} | {'all at once' if not gap else f'{gap:g} ms apart'} | "
                         f"{r['wall_ms']:.0f} | {_times(r['x_realtime'])} | {r['rtf_p50']:.3f} | "
                         f"{_ms(r['ttfp_p50_ms'])} / {_ms(r['ttfp_p95_ms'])} | {codec.get('count', 0)} | "
                         f"{codec.get('busy_ms', 0):.0f} | {lm.get('busy_ms', 0):.0f} | {lm.get('count', 0)} |")
        lines.append("")
    return "\n".join(lines).rstrip()
