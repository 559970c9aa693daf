"""Rewrite the figures in the README and docs/ from the benchmark records in bench/results/.

    python scripts/render_figures.py            # rewrite the marked blocks in place
    python scripts/render_figures.py --check    # exit 1, naming the document, if one is out of date

Every figure in those blocks comes from a JSON record written by a benchmark (`python -m bench.engine
--json ...`, `python -m bench.reliability.figures --json ...`); every table says which machine
ran it and when. Blocks, between `<!-- figures:NAME:start -->` and `<!-- figures:NAME:end -->`:

    README.md             headline     per machine kind, the newest main record's one-stream and
                                       most-streams figures
    docs/PERFORMANCE.md   cpu-bench    engine records run on CPU
                          gpu-bench    engine records run on CUDA (a "pending" line while there are none)
                          gpu-trace    where the wall time goes (bench/engine/trace.py)
                          gpu-arrivals requests arriving one by one (engine_trace --arrival-gaps-ms)
                          precision    fidelity and speed of each precision mode (bench/engine/fidelity.py)
                          reference    side by side with the upstream implementation (bench/engine/reference.py)
    docs/DEPLOY.md        spaces-hardware  per Spaces hardware: the mode the app picks, the nearest
                                       measured figures (engine, cold-start and ZeroGPU records)
                          cold-start   every cold-start record: milestones and where the time went
                          aoti         the AOTInductor step against eager (bench/deploy/aoti_step.py)
    docs/RELIABILITY.md   reliability  the reliability record (load, disconnect storm, queue, soak, and
                                       the hostile clients: attack TTFP, cap, stalls, decode, disk, logs)
    docs/SERVING.md       serving      the server under N concurrent OpenAI clients, per format, beside the
                                       in-process bench of the same run (bench/http/load.py), on CPU
                          serving-gpu  the same on a GPU (bench/http/device_load.sh), with the search for
                                       the most listeners per format that hold the target
                          serving-changes  delivery-path changes side by side (bench/http/ab.py)
                          serving-encoder-pool  --encoder-processes settings side by side (bench/http/load.py)
                          serving-trace  traced load runs: where a request's time goes (bench/http/load.py --trace)
    docs/PLAYER.md        player-links the player on throttled links beside its targets, Opus's start-up
                                       against 16-bit PCM (python -m bench.player_links)
    docs/BROWSER_ENGINE.md  browser-engine  the in-browser engine beside the torch CPU engine
                                       (python -m bench.browser_engine)
    docs/API.md           agents       the voice-agent socket and clients (python -m bench.agents)

A figure under a heading comes from a record that measured it (the newest such record), never from
another row. Records in bench/results/archive/ (superseded by newer runs) are not rendered.
Pure text in, text out: the same records always give the same bytes, and a rendered document
renders to itself.
"""

from __future__ import annotations

import argparse
import calendar
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures_agents import render_agents
from figures_browser import render_browser
from figures_common import _caption, _date, _memory, _ms, _ranged, _rtf, _times
from figures_deploy import render_aoti, render_cold_start
from figures_player import render_player
from figures_precision import render_precision, render_reference
from figures_reliability import render_reliability
from figures_serving import (
    render_serving,
    render_serving_changes,
    render_serving_encoder_pool,
    render_serving_gpu,
    render_serving_trace,
)
from figures_trace import render_arrivals, render_trace

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCUMENTS = {"README.md": ("headline",),
             "docs/PERFORMANCE.md": ("cpu-bench", "gpu-bench", "gpu-trace", "gpu-arrivals", "precision", "reference"),
             "docs/DEPLOY.md": ("spaces-hardware", "cold-start", "aoti"),
             "docs/RELIABILITY.md": ("reliability",), "docs/SERVING.md": ("serving", "serving-gpu", "serving-changes",
                                                                              "serving-encoder-pool", "serving-trace"),
             "docs/PLAYER.md": ("player-links",),
             "docs/BROWSER_ENGINE.md": ("browser-engine",), "docs/API.md": ("agents",)}
GPU_COMMAND = ("python -m bench.engine --streams 1,4,16,64,256 --frames 100 --repeats 3 --components "
               "--json bench/results/gpu-h200.json")


def load_records(folder: Path) -> list[tuple[str, dict]]:
    """(file name, record) for every *.json in `folder`, in file-name order."""
    return [(path.name, json.loads(path.read_text())) for path in sorted(folder.glob("*.json"))]


def engine_title(record: dict) -> str:
    setup = record["setup"]
    quantize = setup.get("quantize")
    title = f"`--quantize {quantize}`" if quantize else f"{setup['lm_dtype']} LM, {setup['codec_dtype']} codec"
    if setup.get("voice", "").startswith("cold"):
        title += ", a new voice for every request (`--cold-voice`)"
    for key, (name, env) in SWITCHES.items():
        if setup.get(key) is False and setup["device"].startswith("cuda"):
            title += f", {name} off (retired switch `{env}=1`)"
    return title


# GPU engine features a bench can run without (record setup key -> name, environment switch): a
# record with one off is shown beside the main one as "off -> on".
SWITCHES = {"fused_kernels": ("fused kernels", "TTS_NO_FUSED_KERNELS"),
            "step_ahead": ("step-ahead", "TTS_NO_STEP_AHEAD"),
            "engine_prepares": ("engine-thread request preparation", "TTS_NO_ENGINE_PREPARE"),
            "split_readout": ("a codec readout thread", "TTS_NO_SPLIT_READOUT")}
# A comparison is shown only for records taken in one machine session (side by side).
SIDE_BY_SIDE_S = 3600


def _is_main(setup: dict) -> bool:
    """Default settings: full precision, a warm voice, and (on a GPU, where they exist) every engine
    feature on. A CPU record lists the GPU-only features as off: that is how the CPU runs."""
    on_gpu = str(setup.get("device", "")).startswith("cuda")
    return (not setup.get("quantize") and not setup.get("voice", "").startswith("cold")
            and (not on_gpu or all(setup.get(key) is not False for key in SWITCHES)))


def _ttfp(row: dict) -> str:
    return f"{_ms(row['ttfp_p50_ms']['median'])}/{_ms(row['ttfp_p95_ms']['median'])}"


def _when(record: dict) -> float:
    return calendar.timegm(time.strptime(record["date"], "%Y-%m-%dT%H:%M:%SZ"))


def switch_comparison(chosen: list[tuple[str, dict]], key: str) -> str:
    """A feature on against off (its environment switch), per concurrency level both records ran:
    the main record against the one with only that feature off."""
    name, _ = SWITCHES[key]
    on = next(((s, r) for s, r in chosen if r["setup"].get(key) is True and _is_main(r["setup"])), None)
    off = next(((s, r) for s, r in chosen if r["setup"].get(key) is False
                and _is_main({**r["setup"], key: True})), None)
    if on is None or off is None or abs(_when(on[1]) - _when(off[1])) > SIDE_BY_SIDE_S:
        return ""
    rows_on, rows_off = (next(iter(r["modes"].values())) for _, r in (on, off))
    by_level = {r["streams"]: r for r in rows_off}
    parts = [f"{r['streams']} stream{'s' if r['streams'] > 1 else ''}: RTF p50 "
             f"{_rtf(by_level[r['streams']]['rtf_p50']['median'])} → {_rtf(r['rtf_p50']['median'])}, "
             f"× real time {_times(by_level[r['streams']]['x_realtime']['median'])} → "
             f"{_times(r['x_realtime']['median'])}, TTFP p50/p95 {_ttfp(by_level[r['streams']])} → {_ttfp(r)} ms"
             for r in rows_on if r["streams"] in by_level]
    comp_on, comp_off = (next(iter(r.get("components", {}).values()), None) for _, r in (on, off))
    if comp_on and comp_off:
        parts.insert(0, f"LM frame (batch 1) {_ms(comp_off['lm_frame_ms'])} → {_ms(comp_on['lm_frame_ms'])} ms")
    return (f"\n{name[0].upper() + name[1:]} off → on (`{off[0]}` → `{on[0]}`, run back to back on one "
            "machine): " + "; ".join(parts) + ".\n")


def render_engine(source: str, record: dict) -> str:
    setup, modes = record["setup"], record["modes"]
    runs = next(iter(modes.values()))[0]["repeats"]
    compiled = f", LM step compile: {setup['compile']}" if setup.get("compile", "off") != "off" else ""
    several = len(modes) > 1  # a mode column only where the run compared modes (graphed / eager)
    lines = [_caption(engine_title(record), record, source),
             f"{setup['frames']} frames per stream, {setup['prompt_rows']}-row voice-clone prompt, "
             + (f"{setup['context_rows']}-row KV context per stream, " if setup.get("context_rows") else "")
             + f"{setup['sampling']} sampling{compiled}; median of {runs} runs (min–max) after one warm-up run.",
             "",
             "| " + ("mode | " if several else "") + "streams | TTFP p50 (ms) | TTFP p95 (ms) | RTF p50 | RTF max "
             "| × real time | peak memory (level's own) |",
             "|---" * (8 if several else 7) + "|"]
    for label, rows in modes.items():
        for r in rows:
            lines.append("| " + (f"{label} | " if several else "") + f"{r['streams']} | "
                         f"{_ranged(r['ttfp_p50_ms'], _ms)} | "
                         f"{_ms(r['ttfp_p95_ms']['median'])} | {_ranged(r['rtf_p50'], _rtf)} | "
                         f"{_rtf(r['rtf_max']['median'])} | {_ranged(r['x_realtime'], _times)} | "
                         f"{_memory(r['memory'])} |")
    lines.append("")
    if "graphed" in modes and "eager" in modes:
        ratios = [f"streams {g['streams']}: RTF {g['rtf_p50']['median'] / e['rtf_p50']['median']:.2f}, "
                  f"TTFP {g['ttfp_p50_ms']['median'] / e['ttfp_p50_ms']['median']:.2f}"
                  for g, e in zip(modes["graphed"], modes["eager"])]
        lines += ["Graphed / eager (medians, side by side in this run): " + "; ".join(ratios) + ".", ""]
    for label, comp in record.get("components", {}).items():
        lines += [f"Per frame ({label}, batch 1, `--components`): prefill {_ms(comp['prefill_ms'])} ms, "
                  f"LM frame {_ms(comp['lm_frame_ms'])} ms, codec frame {_ms(comp['codec_frame_ms'])} ms.", ""]
    if record.get("fidelity"):
        f = record["fidelity"]
        mode = record["setup"].get("quantize") or "quantised"
        lines += [f"{mode} against fp32 (`--fidelity`, teacher-forced greedy, {f['frames']} frames): "
                  f"{100 * f['top1_agreement']:.1f} % of codes and "
                  f"{100 * f['codebook0_agreement']:.1f} % of first-codebook codes agree, largest audio-logit "
                  f"difference {f['max_abs_dlogit']:.3g} (logits reach {f['logit_scale']:.3g}); "
                  f"codec SNR {f['codec_snr_db']:.1f} dB.", ""]
    return "\n".join(lines)


def _engine_order(item: tuple[str, dict]) -> tuple:
    source, record = item
    setup = record["setup"]
    levels = len(next(iter(record["modes"].values()), []))
    # The full sweep of concurrency levels first, then single-level records (other setups).
    return (bool(setup.get("quantize")), setup.get("voice", "").startswith("cold"),
            [setup.get(key) is False for key in SWITCHES], -levels, source)


def render_bench(records: list[tuple[str, dict]], on_gpu: bool) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "engine"
              and (r["setup"]["device"].startswith("cuda") == on_gpu)]
    if not chosen:
        if on_gpu:
            return ("GPU figures pending: no CUDA benchmark record in `bench/results/` yet. On a GPU machine: "
                    f"`{GPU_COMMAND}`, then `python scripts/render_figures.py`.")
        return "CPU figures pending: no CPU benchmark record in `bench/results/` yet."
    tables = "\n".join(render_engine(s, r) for s, r in sorted(chosen, key=_engine_order))
    return (tables + "".join(switch_comparison(chosen, key) for key in SWITCHES)).rstrip("\n")


# ---- Spaces hardware -----------------------------------------------------------------------------

ZEROGPU_COMMAND = "python -m bench.deploy.zerogpu --json bench/results/zerogpu-h200.json"
COLD_START_COMMAND = "python -m bench.deploy.cold_start --json bench/results/cold-start-h200.json"


def _where(source: str, record: dict) -> str:
    m = record["machine"]
    gpu = f"{' + '.join(m['gpus'])}, " if m.get("gpus") else ""
    return f"{gpu}{m['usable_cpus']} CPUs, {_date(record)}, `{source}`"


def _engine_figure(chosen: list[tuple[str, dict]], mode: str | None = None) -> str | None:
    """One stream's TTFP and RTF (medians) from the newest main engine record in `chosen` (no precision
    mode, warm voices, every feature on) that measured one stream, in `mode` when given. None when no
    record did: never another concurrency level's figure under a one-stream heading."""
    found = []
    for source, record in chosen:
        if not _is_main(record["setup"]):
            continue
        modes = record["modes"]
        rows = modes.get(mode) if mode else next(iter(modes.values()), None)
        row = next((r for r in rows or [] if r["streams"] == 1), None)
        if row is not None:
            found.append((record["date"], source, record, row))
    if not found:
        return None
    _, source, record, row = max(found, key=lambda item: (item[0], item[1]))
    label = f"{engine_title(record)}{f', {mode}' if mode else ''}"
    return (f"TTFP {_ms(row['ttfp_p50_ms']['median'])} ms, RTF {_rtf(row['rtf_p50']['median'])} "
            f"({label}; {_where(source, record)})")


def _zerogpu_figure(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "zerogpu" and r["machine"].get("gpus")]
    if not chosen:
        return f"pending: `{ZEROGPU_COMMAND}` on a GPU machine"
    source, r = chosen[-1]
    warm, cold = r["warm"], r["cold"]
    return (f"local harness (not Spaces' scheduler): first call of a worker TTFP {_ms(cold['ttfp_ms'])} ms "
            f"(fork, CUDA start, weights to the GPU, first kernels), later calls TTFP {_ms(warm['ttfp_ms']['median'])} ms, "
            f"RTF {_rtf(warm['rtf']['median'])} ({_where(source, r)})")


def _cold_start_line(records: list[tuple[str, dict]]) -> str:
    # Machines with a GPU only: every start (CPU ones too) and its phases are in docs/DEPLOY.md.
    chosen = [(s, r) for s, r in records if r.get("kind") == "cold_start" and r["machine"].get("gpus")]
    if not chosen:
        return (f"Process start → first audio: pending (`{COLD_START_COMMAND}` on the GPU; targets on an H200: "
                "≤ 15 s with an empty compile cache, ≤ 8 s with a warm one).")
    lines = []
    for source, r in chosen:
        runs = {run["scenario"]: run for run in r["runs"]}
        parts = []
        for name, label in (("empty", "empty cache"), ("warm", "warm cache")):
            run = runs.get(name)
            if run is None:
                continue
            steps = [f"server answering after {run['server_up_s']:.1f} s"] if run.get("server_up_s") else []
            steps.append(f"model ready after {run['ready_s']:.1f} s")
            if run.get("graphs_s"):
                steps.append(f"CUDA graphs in use after {run['graphs_s']:.1f} s")
            parts.append(f"{label} {run['first_audio_s']:.1f} s ({', '.join(steps)})")
        what = r["setup"].get("what", "python app.py")
        host = f", {r['setup']['host']}" if r["setup"].get("host") else ""
        lines.append(f"Process start → first audio of `{what}` ({r['setup']['weights']}, device "
                     f"{next(iter(runs.values()))['device']}{host}): " + "; ".join(parts) + f". {_where(source, r)}.")
    return "\n\n".join(lines)


def render_spaces(records: list[tuple[str, dict]]) -> str:
    """The Deploy-on-Spaces table: per hardware, the mode the app picks and the nearest measured figures."""
    engines = [(s, r) for s, r in records if r.get("kind") == "engine"]
    cpu = [(s, r) for s, r in engines if not r["setup"]["device"].startswith("cuda")]
    gpu = [(s, r) for s, r in engines if r["setup"]["device"].startswith("cuda")]
    cpu_figure = _engine_figure(cpu) or "not measured (no one-stream CPU record)"
    gpu_figure = _engine_figure(gpu, "graphed") or f"not measured (no one-stream GPU record): `{GPU_COMMAND}`"
    gpu_eager = _engine_figure(gpu, "eager")
    rows = [
        ("ZeroGPU (free accounts: up to 2 Spaces; half an RTX Pro 6000 Blackwell per call by default)",
         "ZeroGPU mode, automatic (`SPACES_ZERO_GPU`): the page generates in `@spaces.GPU` calls, eager; "
         "the API on the CPU engine", _zerogpu_figure(records)),
        ("CPU basic (2 vCPU, 16 GB; paid plan to create)", "CPU engine, 1 torch thread, `--quantize auto`",
         f"measured on this project's 2-vCPU machine: {cpu_figure}"),
        ("CPU upgrade (8 vCPU, 32 GB)", "CPU engine, 4 torch threads, `--quantize auto`",
         "not measured; nearest: the 2-vCPU figures (one stream is bound by memory bandwidth, so more "
         "vCPUs mostly help several streams at once)"),
        ("T4 small / medium (16 GB, sm 7.5)", "CUDA engine, fp16 LM (no native bf16), compile + CUDA graphs "
         "built in the background", "not measured; nearest: the H200 figures below, which a T4 will not reach"),
        ("L4 / A10G (24 GB)", "CUDA engine, bf16 LM, compile + CUDA graphs in the background",
         "not measured; nearest: the H200 figures below"),
        ("A100 / H100 / H200", "CUDA engine, bf16 LM, compile + CUDA graphs in the background",
         f"graphed: {gpu_figure}" + (f"; before the graphs are ready (eager): {gpu_eager}" if gpu_eager else "")),
    ]
    lines = ["| hardware | what the app runs there | TTFP / RTF, one stream (measured, or the nearest measured machine) |",
             "|---|---|---|"]
    lines += [f"| {hardware} | {mode} | {figure} |" for hardware, mode, figure in rows]
    return "\n".join([*lines, "", _cold_start_line(records)])


# ---- the README's headline: one figure per machine kind ---------------------------------------------


def _newest_main(chosen: list[tuple[str, dict]], mode: str | None) -> tuple[str, dict, list[dict]] | None:
    """The newest main engine record (see `_is_main`) with a one-stream row in `mode`, and its rows."""
    found = []
    for source, record in chosen:
        rows = record["modes"].get(mode) if mode else next(iter(record["modes"].values()), None)
        if _is_main(record["setup"]) and any(r["streams"] == 1 for r in rows or []):
            found.append((record["date"], source, record, rows))
    return max(found, key=lambda item: item[:2])[1:] if found else None


def render_headline(records: list[tuple[str, dict]]) -> str:
    """Per machine kind: one stream's first audio and RTF, and the most streams that record ran."""
    engines = [(s, r) for s, r in records if r.get("kind") == "engine"]
    lines = ["| machine | one stream: first audio, RTF | most streams in that run: × real time (RTF max) | record |",
             "|---|---|---|---|"]
    for on_gpu, mode in ((False, None), (True, "graphed")):
        picked = _newest_main([(s, r) for s, r in engines if r["setup"]["device"].startswith("cuda") == on_gpu], mode)
        if picked is None:
            lines.append(f"| {'GPU' if on_gpu else 'CPU'} | not measured | not measured | – |")
            continue
        source, record, rows = picked
        one, most = next(r for r in rows if r["streams"] == 1), max(rows, key=lambda r: r["streams"])
        m = record["machine"]
        machine = " + ".join(m["gpus"]) if on_gpu else f"{m['cpu_model']}, {m['usable_cpus']} vCPUs"
        lines.append(f"| {machine} ({engine_title(record)}) | {_ms(one['ttfp_p50_ms']['median'])} ms, "
                     f"RTF {_rtf(one['rtf_p50']['median'])} | {most['streams']} streams: "
                     f"{_times(most['x_realtime']['median'])}× ({_rtf(most['rtf_max']['median'])}) | "
                     f"`{source}`, {_date(record)} |")
    return "\n".join(lines)


# ---- documents -----------------------------------------------------------------------------------


def render_blocks(records: list[tuple[str, dict]]) -> dict[str, str]:
    return {"cpu-bench": render_bench(records, on_gpu=False), "gpu-bench": render_bench(records, on_gpu=True),
            "reliability": render_reliability(records), "spaces-hardware": render_spaces(records),
            "precision": render_precision(records), "reference": render_reference(records),
            "gpu-trace": render_trace(records), "gpu-arrivals": render_arrivals(records), "headline": render_headline(records),
            "cold-start": render_cold_start(records), "aoti": render_aoti(records),
            "serving": render_serving(records), "serving-gpu": render_serving_gpu(records),
            "serving-changes": render_serving_changes(records),
            "serving-encoder-pool": render_serving_encoder_pool(records), "serving-trace": render_serving_trace(records), "player-links": render_player(records),
            "browser-engine": render_browser(records), "agents": render_agents(records)}


def replace_block(text: str, name: str, body: str) -> str:
    """`text` with the lines between the markers of block `name` replaced by `body`."""
    pattern = re.compile(rf"(<!-- figures:{re.escape(name)}:start -->\n).*?(<!-- figures:{re.escape(name)}:end -->)",
                         re.DOTALL)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"expected one <!-- figures:{name}:start --> ... <!-- figures:{name}:end --> block")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def render_document(text: str, names: tuple[str, ...], blocks: dict[str, str]) -> str:
    for name in names:
        text = replace_block(text, name, blocks[name])
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of JSON records")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root holding the documents")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a document is stale")
    args = parser.parse_args(argv)
    blocks = render_blocks(load_records(args.results))
    stale = []
    for relative, names in DOCUMENTS.items():
        path = args.root / relative
        old = path.read_text()
        new = render_document(old, names, blocks)
        if new != old:
            stale.append(relative)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python scripts/render_figures.py", file=sys.stderr)
        return 1
    for relative in stale:
        print(f"rewrote the figures in {relative}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
