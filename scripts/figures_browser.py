"""The in-browser engine's speed block of docs/BROWSER_ENGINE.md (records of bench/browser_engine.py)."""

from __future__ import annotations

from figures_common import _caption

COMMAND = ("python -m tts_core make-random-checkpoint /tmp/full && python bench/browser_engine.py "
           "--lm /tmp/full/lm --codec /tmp/full/codec --json bench/results/browser-engine-cpu.json")


def _ranged(figure: dict, fmt: str) -> str:
    return f"{figure['median']:{fmt}} ({figure['min']:{fmt}}–{figure['max']:{fmt}})"


def _maybe(value: float | None, fmt: str) -> str:
    return "–" if value is None else f"{value:{fmt}}"


def render_browser(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "browser_engine"]
    if not chosen:
        return f"Figures pending: no `browser_engine` record in `bench/results/` yet. Run `{COMMAND}`."
    parts = []
    for source, record in chosen:
        setup = record["setup"]
        lines = [_caption("In-browser engine vs the torch CPU engine, full-size random weights", record, source),
                 "",
                 f"{setup['frames']} frames greedy, preset voice {setup['voice']}, {setup['browser']}, backend "
                 f"{setup['backend']}; median of {len(record['rows'][0]['rtf']['runs'])} runs (min–max) after one "
                 "warm-up run, side by side in one run.",
                 "",
                 "| engine | threads | TTFP ms | RTF | download MB | load s | memory MB |",
                 "|---|---|---|---|---|---|---|"]
        for row in record["rows"]:
            lines.append(f"| {row['engine']} | {row['threads']} | {_ranged(row['ttfp_ms'], '.0f')} | "
                         f"{_ranged(row['rtf'], '.2f')} | {_maybe(row['download_mb'], '.0f')} | "
                         f"{_maybe(row['load_s'], '.1f')} | {_maybe(row['memory_mb'], '.0f')} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
