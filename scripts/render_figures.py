"""Rewrite the figures in README.md and docs/RELIABILITY.md from the benchmark records in bench/results/.

    python scripts/render_figures.py            # rewrite the marked blocks in place
    python scripts/render_figures.py --check    # exit 1, naming the block, if a document is out of date

Every figure in those blocks comes from a JSON record written by a benchmark (`python -m tts_core
bench --json ...`, `python bench/reliability_figures.py --json ...`); every table says which machine
ran it and when. Blocks, between `<!-- figures:NAME:start -->` and `<!-- figures:NAME:end -->`:

    README.md             cpu-bench    engine records run on CPU
                          gpu-bench    engine records run on CUDA (a "pending" line while there are none)
                          spaces-hardware  per Spaces hardware: the mode the app picks, the nearest
                                       measured figures (engine, cold-start and ZeroGPU records)
                          precision    fidelity and speed of each precision mode (bench/fidelity.py)
                          reference    side by side with the upstream implementation (bench/reference.py)
    docs/RELIABILITY.md   reliability  the reliability record (load, disconnect storm, queue, soak, and
                                       the hostile clients: attack TTFP, cap, stalls, decode, disk, logs)

Pure text in, text out: the same records always give the same bytes, and a rendered document
renders to itself.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures_precision import render_precision, render_reference

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCUMENTS = {"README.md": ("cpu-bench", "gpu-bench", "spaces-hardware", "precision", "reference"),
             "docs/RELIABILITY.md": ("reliability",)}
GPU_COMMAND = "python -m tts_core bench --eager-compare --components --json bench/results/gpu-h200.json"


def load_records(folder: Path) -> list[tuple[str, dict]]:
    """(file name, record) for every *.json in `folder`, in file-name order."""
    return [(path.name, json.loads(path.read_text())) for path in sorted(folder.glob("*.json"))]


# ---- formatting --------------------------------------------------------------------------------


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


def engine_title(record: dict) -> str:
    setup = record["setup"]
    quantize = setup.get("quantize")
    title = f"`--quantize {quantize}`" if quantize else f"{setup['lm_dtype']} LM, {setup['codec_dtype']} codec"
    if setup.get("voice", "").startswith("cold"):
        title += ", a new voice for every request (`--cold-voice`)"
    return title


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
    return (bool(setup.get("quantize")), setup.get("voice", "").startswith("cold"), -levels, source)


def render_bench(records: list[tuple[str, dict]], on_gpu: bool) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "engine"
              and (r["setup"]["device"].startswith("cuda") == on_gpu)]
    if not chosen:
        if on_gpu:
            return ("GPU figures pending: no CUDA benchmark record in `bench/results/` yet. On a GPU machine: "
                    f"`{GPU_COMMAND}`, then `python scripts/render_figures.py`.")
        return "CPU figures pending: no CPU benchmark record in `bench/results/` yet."
    return "\n".join(render_engine(s, r) for s, r in sorted(chosen, key=_engine_order)).rstrip("\n")


# ---- reliability ---------------------------------------------------------------------------------


def _answers(other: list[str]) -> str:
    return f"{len(other)} ({', '.join(other)})" if other else "0"


def _statuses(other: list[int]) -> str:
    return f", other answers: {', '.join(map(str, other))}" if other else ""


def _cleared(seconds: float | None) -> str:
    return "still queued 5 s later" if seconds is None else f"none {seconds:.2f} s later"


def render_reliability(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "reliability"]
    if not chosen:
        return "Reliability figures pending: no record in `bench/results/` yet (`python bench/reliability_figures.py`)."
    source, r = chosen[-1]
    setup, load, storm, queued, soak = r["setup"], r["load"], r["disconnect_storm"], r["left_while_queued"], r["soak"]
    slots = f"{setup['slots']} slots + {setup['queue']} queue"
    lines = [
        _caption("Reliability", r, source),
        f"`python app.py` with the tiny checkpoints, {slots}, `MOSS_TTS_NUM_THREADS={setup['threads']}`; "
        "resources measured from outside with psutil.",
        "",
        "| scenario | requests | served | refused | left early | other |",
        "|---|---|---|---|---|---|",
        f"| load, {load['clients']} at once ({slots}) | {load['clients']} | {load['served']} in full | "
        f"{load['refused_503']} × 503 `queue_full` + `Retry-After` | – | {load['broken']} broken; "
        f"{load['seconds']:.1f} s; peak RSS {load['peak_rss_mib']:.0f} MiB |",
        f"| disconnect storm | {storm['clients']} ({storm['waves']} waves) | – | {_answers(storm['other'])} | "
        f"{storm['aborted_mid_stream']} mid-stream (engine: {storm['engine_cancelled']} cancelled, "
        f"{storm['engine_finished']} finished) | {storm['active_after']} active / {storm['queued_after']} queued "
        f"afterwards; {storm['seconds']:.1f} s |",
        f"| left while queued | {queued['clients']} (+{setup['slots']} holding the slots) | – | – | "
        f"{queued['gave_up']} gave up after {queued['patience_s']:g} s | {queued['queued_after_they_left']} still "
        f"queued right after they left, {_cleared(queued.get('queue_cleared_after_s'))} (slots still held); "
        f"engine {'idle' if queued['engine_idle_afterwards'] else 'busy'} afterwards |",
        f"| soak, sequential | {soak['requests']} | {soak['served_200']} | {soak['refused_503']} | – | "
        f"{soak['answered_404']} × 404 (the intended unknown-voice case){_statuses(soak['other_statuses'])}; "
        f"{soak['seconds']:.1f} s |",
        "",
        "| resource (`python app.py`) | before | after |",
        "|---|---|---|",
        f"| resident memory, soak (after a {soak['warmup']}-request warm-up) | {soak['rss_mib_before']:.1f} MiB | "
        f"{soak['rss_mib_after']:.1f} MiB ({soak['rss_growth_pct']:+.2f} %) |",
        f"| resident memory, disconnect storm | {storm['rss_mib_before']:.1f} MiB | {storm['rss_mib_after']:.1f} MiB |",
        f"| threads, storm (idle, after pruning idle workers) | {storm['threads_idle_before']} | "
        f"{storm['threads_idle_after']} ({storm['threads_right_after']} right after the storm) |",
        f"| threads, soak (idle, after pruning idle workers) | {soak['threads_idle_before']} | {soak['threads_idle_after']} |",
        f"| open file descriptors, storm / soak | {storm['fds_idle_before']} / {soak['fds_before']} | "
        f"{storm['fds_after']} / {soak['fds_after']} |",
        f"| files in the app's `TMPDIR` / `GRADIO_TEMP_DIR`, storm | {storm['tmp_files_before']} | "
        f"{storm['tmp_files_after']} |",
    ]
    if "combined_attack" in r:
        lines += ["", *render_hostile(r)]
    return "\n".join(lines)


def _ms_spread(summary: dict) -> str:
    return f"{summary['median']:.0f} ms ({summary['min']:.0f}–{summary['max']:.0f})"


def render_hostile(r: dict) -> list[str]:
    """The hostile-client figures (issue 14) of a reliability record."""
    attack, cap, stalled, decode, disk, logs = (r["combined_attack"], r["connection_cap"], r["stalled_uploads"],
                                                 r["decode"], r["disk"], r["log_flood"])
    statuses = ", ".join(f"{decode['statuses'].count(s)} × {s}" for s in sorted(set(decode["statuses"])))
    runs = len(attack["idle_ttfp_ms"]["runs"])
    return [
        "| hostile clients (`python app.py`, default limits) | measured |",
        "|---|---|",
        f"| a normal listener's time to first audio, median (min–max) of {runs} | idle: {_ms_spread(attack['idle_ttfp_ms'])}; "
        f"under {attack['stalled_uploads']} stalled uploads + {attack['idle_connections']:,} idle connections + "
        f"the /dev/zero payload on every file input: {_ms_spread(attack['attacked_ttfp_ms'])}, **{attack['ratio']:.2f}×** |",
        f"| during that attack | {attack['connections_held']:,} idle connections held "
        f"({attack['server_connections_open']:,} open on the server); {attack['payloads_posted']} /dev/zero payloads, "
        f"{attack['payloads_refused_400']} refused with 400; `/health` {attack['health_status']} |",
        f"| connection cap | {cap['held']:,} connections held (the cap: {cap['cap']:,}); the next {cap['beyond_cap']} "
        f"answered 503 at once ({cap['answered_503']} of {cap['beyond_cap']} within {cap['refused_100_in_s']:.2f} s, "
        f"before sending anything); {cap.get('idle_probe', 50)} idle connections all closed by the server within "
        f"{cap['idle_closed_after_s']:.1f} s; "
        f"a listener {'served' if cap['served_after'] else 'NOT served'} afterwards |",
        f"| stalled uploads | {stalled['stalled']} uploads announce {stalled['declared_bytes'] / 2**20:.1f} MiB (just "
        f"under the body cap; 4 used to lock every POST out) and send nothing: a listener is served meanwhile (HTTP {stalled['listener_status']}, first audio after "
        f"{stalled['listener_ttfp_ms']:.0f} ms); {stalled['answered_408']} answered 408, all within "
        f"{stalled['all_cut_after_s']:.1f} s |",
        f"| the finding's clip (59 s, 384 kHz stereo FLAC, {decode['finding_clip_kib']} KiB) | decoded whole: "
        f"{decode['finding_whole_decode_mib']:.0f} MiB; now {decode['finding_now_mib']:.1f} MiB (refused from its "
        "header) |",
        f"| the worst clip accepted (59 s, 192 kHz stereo FLAC, {decode['worst_clip_kib']} KiB) | decoded whole: "
        f"{decode['worst_whole_decode_mib']:.0f} MiB; now {decode['worst_now_mib']:.0f} MiB (its first 20.5 s, "
        f"trimmed before resampling); {decode['concurrent']} clone requests of it at once: app resident memory "
        f"{decode['rss_before_mib']:.0f} → {decode['rss_peak_mib']:.0f} MiB at peak; answers {statuses} |",
        f"| disk | {disk['uploaded_files']:,} files uploaded ({disk['uploaded_mib']:.0f} MiB): Gradio's folder holds "
        f"{disk['folder_files']} files / {disk['folder_mib']:.0f} MiB (bound {disk['bound_files']} files / "
        f"{disk['bound_mib']} MiB), {disk['evicted']:,} evicted; {disk['cloned_clips']} distinct cloned clips: "
        f"{disk['code_files']} voice-code files in the cache, the presets' included (bound "
        f"{disk['code_bound_files']:,}) |",
        f"| log storm | {logs['bad_requests']:,} malformed requests in {logs['seconds']:.1f} s: "
        f"{logs['log_lines']} log lines |",
        "",
        "Peak decode memory is measured with tracemalloc in the bench process (numpy's buffers); resident memory "
        "of the app with psutil, sampled every 20 ms.",
    ]


# ---- Spaces hardware -----------------------------------------------------------------------------

ZEROGPU_COMMAND = "python bench/zerogpu_gpu.py --json bench/results/zerogpu-h200.json"
COLD_START_COMMAND = "python bench/cold_start.py --json bench/results/cold-start-h200.json"


def _where(source: str, record: dict) -> str:
    m = record["machine"]
    gpu = f"{' + '.join(m['gpus'])}, " if m.get("gpus") else ""
    return f"{gpu}{m['usable_cpus']} CPUs, {_date(record)}, `{source}`"


def _engine_figure(chosen: list[tuple[str, dict]], mode: str | None = None) -> str | None:
    """One stream's TTFP and RTF (medians) from the first engine record in `chosen` with warm voices."""
    for source, record in chosen:
        if record["setup"].get("voice", "").startswith("cold"):
            continue
        modes = record["modes"]
        rows = modes.get(mode) if mode else next(iter(modes.values()))
        if not rows:
            continue
        row = next((r for r in rows if r["streams"] == 1), rows[0])
        label = f"{engine_title(record)}{f', {mode}' if mode else ''}"
        return (f"TTFP {_ms(row['ttfp_p50_ms']['median'])} ms, RTF {_rtf(row['rtf_p50']['median'])} "
                f"({label}; {_where(source, record)})")
    return None


def _zerogpu_figure(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "zerogpu" and r["machine"].get("gpus")]
    if not chosen:
        return f"pending: `{ZEROGPU_COMMAND}` on a GPU machine"
    source, r = chosen[-1]
    warm, cold = r["warm"], r["cold"]
    return (f"local harness (not Spaces' scheduler): first call of a worker TTFP {_ms(cold['ttfp_ms'])} ms "
            f"(fork, CUDA start, weights to the GPU), later calls TTFP {_ms(warm['ttfp_ms']['median'])} ms, "
            f"RTF {_rtf(warm['rtf']['median'])} ({_where(source, r)})")


def _cold_start_line(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "cold_start"]
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
        lines.append(f"Process start → first audio of `{what}` ({r['setup']['weights']}, device "
                     f"{next(iter(runs.values()))['device']}): " + "; ".join(parts) + f". {_where(source, r)}.")
    return "\n\n".join(lines)


def render_spaces(records: list[tuple[str, dict]]) -> str:
    """The Deploy-on-Spaces table: per hardware, the mode the app picks and the nearest measured figures."""
    engines = [(s, r) for s, r in records if r.get("kind") == "engine"]
    cpu = sorted([(s, r) for s, r in engines if not r["setup"]["device"].startswith("cuda")], key=_engine_order)
    gpu = [(s, r) for s, r in engines if r["setup"]["device"].startswith("cuda")]
    cpu_figure = _engine_figure(cpu) or "pending (no CPU record)"
    gpu_figure = _engine_figure(gpu, "graphed") or f"pending: `{GPU_COMMAND}`"
    gpu_eager = _engine_figure(gpu, "eager")
    rows = [
        ("ZeroGPU (free accounts: up to 2 Spaces; H200 slice per call)",
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


# ---- documents -----------------------------------------------------------------------------------


def render_blocks(records: list[tuple[str, dict]]) -> dict[str, str]:
    return {"cpu-bench": render_bench(records, on_gpu=False), "gpu-bench": render_bench(records, on_gpu=True),
            "reliability": render_reliability(records), "spaces-hardware": render_spaces(records),
            "precision": render_precision(records), "reference": render_reference(records)}


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
