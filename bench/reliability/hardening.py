"""Issue 14's figures (hostile clients) against a running `python app.py`, for `bench.reliability.figures`:
TTFP of a normal listener idle vs under the combined attack, connections held and refused at the
cap, stalled uploads, the decode cost of the worst clip, the disk bound, log lines of a flood.

The attackers are `bench.lib.reliability_attacks`, the listener `bench.lib.reliability_clients`: the
tests assert on the same scenarios (without timings); here they are timed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import re
import socket
import statistics
import time
import tracemalloc

import httpx
import numpy as np
import soundfile as sf

from bench.lib.app import PeakRss
from bench.lib.reliability_attacks import STALLED_BYTES, HeldSockets, combined_attack, stalled_upload_head
from bench.lib.reliability_clients import listen, read_reply

LISTENS = 7
IDLE, STALLED = 1000, 4


def _metrics(url: str) -> dict[str, float]:
    values = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        match = re.match(r"^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if match:
            values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return values


def _ttfp_ms(url: str, count: int = LISTENS) -> list[float]:
    out = []
    for _ in range(count):
        first, audio, status = listen(url)
        if status != 200 or not audio or first is None:
            raise RuntimeError(f"the listener got no audio (HTTP {status})")
        out.append(round(first * 1000, 1))
    return out


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def measure_combined_attack(url: str) -> dict:
    """Listener TTFP idle, then under 4 stalled uploads + 1,000 idle connections + /dev/zero payloads."""
    _ttfp_ms(url, 2)  # warm-up
    idle = _ttfp_ms(url)
    with combined_attack(url, idle=IDLE, stalled=STALLED) as attack:
        deadline = time.monotonic() + 60
        while attack["idle"].open_now < IDLE and time.monotonic() < deadline:
            time.sleep(0.1)
        held = attack["idle"].open_now
        server_open = _metrics(url).get("tts_http_connections_open", 0.0)
        attacked = _ttfp_ms(url)
        health = httpx.get(url + "/health", timeout=30).status_code
        flood = attack["flood"].statuses
    return {"idle_connections": IDLE, "stalled_uploads": STALLED, "idle_ttfp_ms": _summary(idle),
            "attacked_ttfp_ms": _summary(attacked),
            "ratio": round(statistics.median(attacked) / statistics.median(idle), 2),
            "connections_held": held, "server_connections_open": int(server_open), "health_status": health,
            "payloads_posted": len(flood), "payloads_refused_400": flood.count(400)}


def measure_connection_cap(url: str, idle_probe: int = 50) -> dict:
    """Hold the cap's worth of idle connections (reopened as the server closes them, as an attacker
    would), then open 100 more: those are answered 503 at once. Then how soon the server closes idle
    connections (the request-head deadline), and whether a listener is served once the holders left."""
    cap = int(_metrics(url)["tts_http_connection_cap"])
    port = int(url.rsplit(":", 1)[1])
    with HeldSockets(port, cap, reopen=True) as holders:
        deadline = time.monotonic() + 120
        while holders.open_now < cap and time.monotonic() < deadline:
            time.sleep(0.05)
        held = holders.open_now
        started = time.perf_counter()
        with HeldSockets(port, 100, reopen=False) as extra:
            while extra.closed_by_server < extra.opened and time.perf_counter() - started < 60:
                time.sleep(0.01)
        refused_s = time.perf_counter() - started
    with HeldSockets(port, idle_probe, reopen=False) as probe:
        started = time.perf_counter()
        while probe.closed_by_server < probe.opened and time.perf_counter() - started < 60:
            time.sleep(0.05)
        closed_s = time.perf_counter() - started
    return {"cap": cap, "held": held, "beyond_cap": 100, "answered_503": extra.refused_503,
            "refused_100_in_s": round(refused_s, 2), "idle_probe": idle_probe, "idle_closed_after_s": round(closed_s, 1),
            "served_after": listen(url)[2] == 200}


def measure_stalled(url: str, count: int = 64, declared: int = STALLED_BYTES) -> dict:
    """`count` uploads announce a body just under the cap and send nothing (four used to lock every
    POST out): the listener is served meanwhile; each is answered 408 when its body deadline passes."""
    port = int(url.rsplit(":", 1)[1])
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(count)]
    started = time.perf_counter()
    for sock in sockets:
        sock.sendall(stalled_upload_head(declared))
    first, _, status = listen(url)
    replies = [read_reply(sock, 60) for sock in sockets]
    cut_s = time.perf_counter() - started
    for sock in sockets:
        sock.close()
    return {"stalled": count, "declared_bytes": declared, "listener_status": status,
            "listener_ttfp_ms": round(first * 1000, 1) if first else None,
            "answered_408": sum(r.startswith(b"HTTP/1.1 408") for r in replies), "all_cut_after_s": round(cut_s, 1)}


def _flac(rate: int, seconds: float, amplitude: float) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    tone = (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    out = io.BytesIO()
    sf.write(out, np.stack([tone, tone], axis=1), rate, format="FLAC")
    return out.getvalue()


def _peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        with contextlib.suppress(Exception):  # a refusal is a result too; its cost is what is measured
            fn()
        return round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
    finally:
        tracemalloc.stop()


def measure_decode(url: str, ps) -> dict:
    """Peak memory of decoding the finding's clip (59 s, 384 kHz stereo) and of the worst clip the
    default settings accept (59 s, 192 kHz stereo), decoded whole as before and the way the server
    does now (tracemalloc, in this process); then 16 clone requests of the worst clip at once
    against the app (its resident memory, sampled)."""
    from studio.limits.clip_decode import decode_clip
    from studio.settings import ServerSettings
    from tts_core.audio.io import load_audio, to_codec_input

    settings = ServerSettings()
    finding, worst = _flac(384_000, 59.0, 0.0), _flac(192_000, 59.0, 3e-4)
    out = {"finding_clip_kib": len(finding) // 1024, "worst_clip_kib": len(worst) // 1024}
    for name, clip in (("finding", finding), ("worst", worst)):
        out[f"{name}_whole_decode_mib"] = _peak_mib(lambda clip=clip: to_codec_input(*load_audio(clip)))
        out[f"{name}_now_mib"] = _peak_mib(lambda clip=clip: decode_clip(clip, settings))
    body = base64.b64encode(worst).decode()

    async def sixteen() -> list[int]:
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
            replies = await asyncio.gather(*(client.post("/api/tts/stream", json={
                "text": f"Clone {i}.", "max_frames": 2, "ref_audio": body}) for i in range(16)))
        return [r.status_code for r in replies]

    before = ps.memory_info().rss
    with PeakRss(ps) as peak:
        statuses = asyncio.run(sixteen())
    out.update({"concurrent": 16, "rss_before_mib": round(before / 2**20, 1),
                "rss_peak_mib": round(peak.peak_bytes / 2**20, 1), "statuses": sorted(statuses)})
    return out


def measure_disk(url: str, gradio_dir, cache_dir) -> dict:
    """Finding 5's uploads: 5,000 small files (10 requests of 500) and 30 files of 9 MiB; then what
    Gradio's folder holds. And the voice-code cache after 20 distinct cloned clips."""
    with httpx.Client(base_url=url, timeout=120) as client:
        for batch in range(10):
            files = [("files", (f"f{batch}-{i}.wav", os.urandom(64), "audio/wav")) for i in range(500)]
            client.post("/gradio_api/upload", files=files).raise_for_status()
        big = os.urandom(9 * 2**20)
        for index in range(30):
            client.post("/gradio_api/upload", files={"files": (f"big{index}.wav", big[index:] + bytes(index),
                                                               "audio/wav")}).raise_for_status()
        time.sleep(2.0)  # the last sweep runs after the last answer
        rng = np.random.default_rng(3)
        for _ in range(20):
            clip = io.BytesIO()
            sf.write(clip, (rng.standard_normal(24_000) * 0.1).astype(np.float32), 24_000, format="WAV")
            client.post("/api/tts/stream", json={"text": "Hi.", "max_frames": 1,
                                                 "ref_audio": base64.b64encode(clip.getvalue()).decode()})
    files = [p for p in gradio_dir.rglob("*") if p.is_file() and len(p.parent.name) == 64]
    codes = list(cache_dir.rglob("*.npy"))
    metrics = _metrics(url)
    return {"uploaded_files": 5030, "uploaded_mib": round((5000 * 64 + 30 * 9 * 2**20) / 2**20, 1),
            "folder_files": len(files), "folder_mib": round(sum(p.stat().st_size for p in files) / 2**20, 1),
            "evicted": int(metrics.get("tts_gradio_upload_evicted_files_total", 0)),
            "bound_files": 512, "bound_mib": 256, "cloned_clips": 20, "code_files": len(codes),
            "code_bound_files": 4096}


def measure_log_flood(url: str, log_path, count: int = 1000) -> dict:
    """`count` malformed requests: how many log lines they leave."""
    port = int(url.rsplit(":", 1)[1])
    before = log_path.read_text(errors="replace").count("\n")
    started = time.perf_counter()
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            sock.recv(1024)
    seconds = time.perf_counter() - started
    time.sleep(0.5)
    return {"bad_requests": count, "seconds": round(seconds, 1),
            "log_lines": log_path.read_text(errors="replace").count("\n") - before}
