"""Renderers of `scripts/render_figures.py` for the reliability record (`bench/reliability/figures.py`):
load, disconnect storm, queue, soak, and the hostile clients of issue 14."""

from __future__ import annotations

from figures_common import _caption


def _answers(other: list[str]) -> str:
    return f"{len(other)} ({', '.join(other)})" if other else "0"


def _statuses(other: list[int]) -> str:
    return f", other answers: {', '.join(map(str, other))}" if other else ""


def _cleared(seconds: float | None) -> str:
    return "still queued 5 s later" if seconds is None else f"none {seconds:.2f} s later"


def render_reliability(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "reliability"]
    if not chosen:
        return "Reliability figures pending: no record in `bench/results/` yet (`python -m bench.reliability.figures`)."
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
