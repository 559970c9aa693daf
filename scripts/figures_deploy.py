"""The figures of docs/DEPLOY.md: where a start's time goes (bench/deploy/cold_start.py records) and the
AOTInductor-compiled step against the eager one (bench/deploy/aoti_step.py records)."""

from __future__ import annotations

import re

from figures_common import _caption

_PATH = re.compile(r"/[^\s…]+")  # a local path in an app's log line: not for a document

COLD_START_COMMAND = "python -m bench.deploy.cold_start --device cpu --json bench/results/cold-start-cpu.json"
AOTI_COMMAND = "python -m bench.deploy.aoti_step --json bench/results/aoti-step-h200.json"


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} s"


def render_cold_start(records: list[tuple[str, dict]]) -> str:
    """Per cold-start record: each scenario's milestones, then where the time went (its phases)."""
    chosen = sorted(((s, r) for s, r in records if r.get("kind") == "cold_start"), key=lambda sr: sr[1]["date"])
    if not chosen:
        return f"No cold-start record yet: `{COLD_START_COMMAND}`."
    blocks = []
    for source, record in chosen:
        titled = {**record, "command": record.get("command", "python -m bench.deploy.cold_start")}
        lines = [_caption(f"Cold start of `{record['setup'].get('what', 'python app.py')}`", titled, source),
                 f"Weights: {record['setup']['weights']}; device {record['setup'].get('device', '?')}.", "",
                 "| cache | server answering | model ready | first audio | page served | first request's TTFP once warm |",
                 "|---|---|---|---|---|---|"]
        for run in record["runs"]:
            warm = run.get("warm_request_ttfp_ms") or run.get("first_request_ttfp_ms")
            lines.append(f"| {run['scenario']} | {_s(run.get('server_up_s'))} | {_s(run.get('ready_s'))} | "
                         f"{_s(run['first_audio_s'])} | {_s(run.get('page_s'))} | "
                         f"{'–' if warm is None else f'{warm:.0f} ms'} |")
        for run in record["runs"]:
            if run.get("phases"):
                steps = "; ".join(f"{t:.1f} s {_PATH.sub('<path>', what)}" for t, what in run["phases"])
                load = (f", load average {run['load_average_1m']:.1f} as it began"
                        if run.get("load_average_1m") is not None else "")
                lines += ["", f"Where the time went ({run['scenario']} cache{load}, seconds from process start): "
                              f"{steps}."]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} s"


def render_aoti(records: list[tuple[str, dict]]) -> str:
    """Per AoTI record: per dtype, the frame time eager vs compiled and whether the codes agree. A
    run where no package loaded timed the eager step twice: it shows no AoTI time and no speed-up."""
    chosen = sorted(((s, r) for s, r in records if r.get("kind") == "aoti_step"), key=lambda sr: sr[1]["date"])
    if not chosen:
        return f"Not measured yet (no GPU here): `{AOTI_COMMAND}` on a CUDA machine."
    blocks = []
    for source, record in chosen:
        lines = [_caption("AOTInductor step vs eager, one stream", record, source), "",
                 "| dtype | architecture | frame, eager | frame, AoTI | speed-up | greedy codes equal | units "
                 "| units ready in |",
                 "|---|---|---|---|---|---|---|---|"]
        for run in record["runs"]:
            outcomes = set(run["units"].values())
            units = (f"all {len(run['units'])}: {outcomes.pop()}" if len(outcomes) == 1
                     else ", ".join(f"{k}: {v}" for k, v in run["units"].items()))
            served = any(not outcome.startswith("eager") for outcome in run["units"].values())
            aoti = f"{run['frame_ms']['aoti']:.2f} ms" if served else "– (no unit loaded)"
            speedup = f"{run['speedup']:.2f}×" if served else "–"
            lines.append(f"| {run['dtype']} | {run['arch']} | {run['frame_ms']['eager']:.2f} ms | {aoti} | {speedup} | "
                         f"{100 * run['codes_equal_share']:.1f} % | {units} | {_seconds(run.get('build_s'))} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
