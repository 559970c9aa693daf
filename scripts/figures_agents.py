"""The voice-agent figures of docs/API.md (block `agents`), from the newest `bench.agents` record."""

from __future__ import annotations


def _ms(figure: dict) -> str:
    if not figure.get("runs"):
        return "–"
    low, mid, high = (round(figure[k] * 1000) for k in ("min", "median", "max"))
    return f"{mid} ms" if low == high else f"{mid} ms ({low}–{high})"


def render_agents(records: list[tuple[str, dict]]) -> str:
    chosen = [(s, r) for s, r in records if r.get("kind") == "agents"]
    if not chosen:
        return "Voice-agent figures pending: no record in `bench/results/` yet (`python -m bench.agents`)."
    source, r = chosen[-1]
    load = r["load_average"]
    engine = r["engine"]
    barge, sessions = r["barge_in"], r["sessions"]
    runs = r["engine_ttfp_s"]["runs"]
    lines = [
        f"**Voice agents, {r['machine']}.** Server: {r['server']} ({engine.get('device')}, {engine.get('threads')} "
        f"thread{'s' if engine.get('threads') != 1 else ''}); run {r['when']} UTC, load average "
        f"{load['before'][0]:g} at the start and {load['after'][0]:g} at the end on {load['cpus']} CPUs: "
        f"`{r['command']}` (`bench/results/{source}`). Medians of {runs} runs (min–max).",
        "",
        "| measure | value |",
        "|---|---|",
        f"| first audio, whole sentence sent at once (engine TTFP + socket) | {_ms(r['engine_ttfp_s'])} |",
        f"| first audio after the first clause, text pushed at {sessions['words_per_s']:g} words/s | "
        f"{_ms(r['after_clause_s'])} |",
        f"| Pipecat OpenAITTSService: first audio frame after TTSStartedFrame | "
        f"{_ms(r['pipecat_openai_first_audio_s'])} |",
        f"| Pipecat OpenAITTSService: TTSStoppedFrame after TTSStartedFrame | {_ms(r['pipecat_openai_total_s'])} |",
        f"| barge-in: audio messages of the cancelled context received after the cancel (most in a run) | "
        f"{barge['late_audio_messages_max']} |",
        f"| barge-in: engine slot free when the next context spoke, every run | "
        f"{'yes' if barge['slot_free_every_run'] else 'no'} |",
        f"| {sessions['count']} sessions at once: first audio after the first clause | {_ms(sessions['after_clause_s'])} |",
        f"| {sessions['count']} sessions at once: lowest audio lead of a context | {_ms(sessions['min_lead_s'])} |",
        f"| {sessions['count']} sessions at once: contexts whose audio stayed ahead of real time | "
        f"{sessions['ahead_of_real_time']} of {sessions['count']} |",
    ]
    return "\n".join(lines)
