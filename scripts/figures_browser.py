"""The in-browser engine's speed block of docs/BROWSER_ENGINE.md (records of bench/browser_engine.py)."""

from __future__ import annotations

from figures_common import _caption

COMMAND = ("python -m tts_core make-random-checkpoint /tmp/full && python -m bench.browser_engine "
           "--lm /tmp/full/lm --codec /tmp/full/codec --json bench/results/browser-engine-cpu.json")


def _ranged(figure: dict, fmt: str) -> str:
    return f"{figure['median']:{fmt}} ({figure['min']:{fmt}}–{figure['max']:{fmt}})"


def _maybe(value: float | None, fmt: str) -> str:
    return "–" if value is None else f"{value:{fmt}}"


def _long(row: dict) -> str:
    long = row.get("long")
    if not long:
        return "–"
    return f"{long['rtf']:.2f} over {long['frames'] * 0.08:.0f} s ({long['ratio'] - 1:+.0%} vs its first {long['first_frames'] * 0.08:.0f} s)"


def _graphs(row: dict) -> str:
    split = row.get("graphs_ms_per_frame")
    if not split:
        return "–"
    return f"{split['local']:.0f} / {split['global']:.0f} / {split['codec']:.0f}"


def _fidelity(record: dict) -> list[str]:
    fidelity = record.get("fidelity")
    if not fidelity:
        return []
    lines = ["", "Fidelity against the fp32 graphs (ONNX Runtime, same build; random weights: flat logits make "
             "greedy agreement a pessimistic proxy):", "",
             "| precision | greedy code agreement | first codebook | codec SNR dB | frames |", "|---|---|---|---|---|"]
    for precision, figures in fidelity.items():
        snr = figures["codec_snr_db"]
        lines.append(f"| {precision} | {figures['greedy_agreement']:.1%} | {figures['first_codebook_agreement']:.0%} | "
                     f"{'exact (same fp32 codec)' if snr is None else f'{snr:.1f}'} | {figures['frames']} |")
    return lines


def render_browser(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "browser_engine"]
    if not chosen:
        return f"Figures pending: no `browser_engine` record in `bench/results/` yet. Run `{COMMAND}`."
    parts = []
    for source, record in chosen:
        setup = record["setup"]
        end = record.get("load_average_1m_end")
        lines = [_caption("In-browser engine vs the torch CPU engine, full-size random weights", record, source)
                 + ("" if end is None else f" Load average {end} at the end."),
                 "",
                 f"{setup['frames']} frames greedy, preset voice {setup['voice']}, {setup['browser']}, backend "
                 f"{setup['backend']}; median of {len(record['rows'][0]['rtf']['runs'])} runs (min–max) after one "
                 "warm-up run, side by side in one run. Download: what speaking fetches (the clip encoder "
                 "comes on the first clone); load: page opened to engine ready, first visit and from the "
                 "browser's cache; graphs: ms per frame in the frame graph / global step / codec.",
                 "",
                 "| engine | threads | TTFP ms | RTF | long request RTF | graphs ms/frame | download MB | load s | "
                 "from cache s |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for row in record["rows"]:
            lines.append(f"| {row['engine']} | {row['threads']} | {_ranged(row['ttfp_ms'], '.0f')} | "
                         f"{_ranged(row['rtf'], '.2f')} | {_long(row)} | {_graphs(row)} | "
                         f"{_maybe(row['download_mb'], '.0f')} | {_maybe(row['load_s'], '.1f')} | "
                         f"{_maybe(row.get('load_cached_s'), '.1f')} |")
        lines += _fidelity(record)
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
