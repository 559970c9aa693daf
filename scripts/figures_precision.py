"""Renderers of `scripts/render_figures.py` for the precision-mode records (`bench/engine/fidelity.py`) and
the side-by-side records against the upstream implementation (`bench/engine/reference.py`)."""

from __future__ import annotations

CPU_LABELS = {"fp32": "fp32 (bit-faithful)", "fp16": "fp16 weights, fp32 math",
              "int8": "int8 global transformer, fp16 local transformer / heads / codec"}
GPU_LABELS = {"fp32": "fp32", "bf16": "bf16 (LM) / bf16 autocast (codec)", "fp16": "fp16 (LM) / fp16 autocast (codec)"}
SIDE_LABELS = {"reference": "reference implementation (upstream)", "ours": "ours, full prefill",
               "ours_voice_cache": "ours, voice prefix reused"}


def _when(record: dict) -> str:
    date = record.get("date") or record["machine"].get("date", "")
    return date.replace("T", " ")[:16] + " UTC"


def _where(record: dict) -> str:
    m = record["machine"]
    cpu = m.get("cpu_model") or m.get("cpu")
    cpus = m.get("usable_cpus") or m.get("cpus_usable")
    gpus = m.get("gpus") or ([m["gpu"]] if m.get("gpu") else [])
    gpu = f", {' + '.join(gpus)}" if gpus else ""
    return f"{cpu}, {cpus} CPUs{gpu}, torch {m['torch']}"


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def render_precision(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "fidelity"]
    if not chosen:
        return ("Pending: `python -m bench.engine.fidelity --device cpu --json bench/results/fidelity-cpu.json` "
                "(and `--device cuda` on a GPU).")
    lines = []
    for source, r in sorted(chosen, key=lambda item: item[1]["setup"]["device"]):
        on_gpu = r["setup"]["device"] != "cpu"
        labels = GPU_LABELS if on_gpu else CPU_LABELS
        frames = next(v["parity"]["frames"] for v in r["modes"].values() if "parity" in v)
        lines += [f"**{'GPU dtypes' if on_gpu else 'CPU weight modes'}.** {_where(r)}; run {_when(r)}: "
                  f"`{r['command']}` (`bench/results/{source}`). Teacher-forced greedy against fp32, {frames} "
                  "frames per prompt: the tiny parity checkpoint on its recorded prompts (cases A, B, D), and the "
                  "full-size model with random weights; codec SNR of a streaming decode of the same codes; "
                  "speed: one batch-1 LM frame and one 1-frame codec decode on the plain path, measured in the "
                  "same run.",
                  "",
                  "| mode | greedy codes agree (parity / full size) | largest audio-logit difference "
                  "(parity / full size; logits reach) | codec SNR | LM frame | codec frame |",
                  "|---|---|---|---|---|---|"]
        for name in sorted(r["modes"], key=lambda n: list(labels).index(n) if n in labels else 99):
            mode = r["modes"][name]
            speed = mode.get("speed", {})
            if "parity" in mode:
                p, f = mode["parity"], mode["full-size random"]
                agree = f"{_pct(p['top1_agreement'])} / {_pct(f['top1_agreement'])}"
                dlogit = f"{p['max_abs_dlogit']:.3g} / {f['max_abs_dlogit']:.3g} ({f['logit_scale']:.0f})"
                snr = f"{min(p['codec_snr_db'], f['codec_snr_db']):.1f} dB"
            else:
                agree, dlogit, snr = "100 % (itself)", "0", "exact"
            lines.append(f"| {labels.get(name, name)} | {agree} | {dlogit} | {snr} | "
                         f"{speed.get('lm_frame_ms', float('nan')):.1f} ms | {speed.get('codec_frame_ms', float('nan')):.1f} ms |")
        lines.append("")
    return "\n".join(lines)


def _side_label(name: str) -> str:
    if name in SIDE_LABELS:
        return SIDE_LABELS[name]
    precision = name.removeprefix("ours_").removesuffix("_voice_cache")
    cached = ", voice prefix reused" if name.endswith("_voice_cache") else ", full prefill"
    return f"ours, {precision} weights{cached}"


def render_reference(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "reference_side_by_side"]
    if not chosen:
        return "Pending: `python -m bench.engine.reference --reference-dir DIR --json bench/results/reference-....json`."
    lines = []
    for source, r in sorted(chosen, key=lambda item: (item[1]["settings"]["device"], item[0])):
        s = r["settings"]
        threads = f", {s['threads']} torch thread{'s' if s['threads'] != 1 else ''}" if s.get("threads") else ""
        lines += [f"**{s['device'].upper()}{threads}.** {_where(r)}; run {_when(r)} (`bench/results/{source}`). "
                  f"One stream, {s['prompt_rows']}-row prompt, {s['frames']} frames, {s['sampling']}; median of "
                  f"{s['repeats']} runs (min–max), the sides alternating run by run.",
                  "",
                  "| side | TTFP (ms) | RTF | reference ÷ this side (TTFP, RTF) |",
                  "|---|---|---|---|"]
        for name, side in r["sides"].items():
            t, f = side["ttfp_ms"], side["rtf"]
            ratio = r["ratios"].get(f"reference_over_{name}")
            versus = f"{ratio['ttfp_ms']:.1f}×, {ratio['rtf']:.1f}×" if ratio else "–"
            lines.append(f"| {_side_label(name)} | {t['median']:.0f} ({t['min']:.0f}–{t['max']:.0f}) | "
                         f"{f['median']:.3f} ({f['min']:.3f}–{f['max']:.3f}) | {versus} |")
        lines.append("")
    return "\n".join(lines)
