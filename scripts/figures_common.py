"""Formatting shared by the renderers of `scripts/render_figures.py`: when and where a record ran."""

from __future__ import annotations


def _date(record: dict) -> str:
    return record["date"].replace("T", " ")[:16] + " UTC"  # "2026-11-30T21:02:39Z" -> "2026-11-30 21:02 UTC"


def _machine(record: dict) -> str:
    m = record["machine"]
    threads = f"{m['torch_threads']} torch thread{'s' if m['torch_threads'] != 1 else ''}"
    text = f"{m['cpu_model']}, {m['usable_cpus']} of {m['logical_cpus']} CPUs usable, {threads}"
    if m.get("ram_gib"):
        text += f", {m['ram_gib']:g} GiB RAM"
    if m.get("gpus"):
        text += f", {' + '.join(m['gpus'])} (CUDA {m['cuda']})"
    return text + f", torch {m['torch']}"


def _caption(title: str, record: dict, source: str) -> str:
    notes = "".join(f" Note: {note.rstrip('.')}." for note in record.get("notes", []))
    load = record.get("load_average_1m")
    busy = f" (load average {load:.1f} at the start)" if load is not None else ""
    return (f"**{title}.** {_machine(record)}; run {_date(record)}{busy}: `{record['command']}` "
            f"(`bench/results/{source}`).{notes}")


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _rtf(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _times(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _ranged(figure: dict, fmt) -> str:
    """The median, and the range over the runs when they differ at the shown precision."""
    low, mid, high = fmt(figure["min"]), fmt(figure["median"]), fmt(figure["max"])
    return mid if low == high else f"{mid} ({low}–{high})"


def _memory(memory: dict) -> str:
    if memory.get("peak_mib") is None:
        return "–"
    kind = {"rss": "RSS", "cuda_allocated": "GPU"}.get(memory["kind"], memory["kind"])
    return f"{memory['peak_mib']:.0f} MiB {kind} (+{memory['growth_mib']:.0f})"
