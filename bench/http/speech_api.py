"""Measure the speech API's round-2 pieces: stretch quality at block joins, and time to first byte.

    python -m bench.http.speech_api [--data ../shared/moss_tts_nano_data] [--runs 7] [--json out.json]

1. Stretch (`tts_core/audio/stretch.py`) on 12 s of real speech (two preset clips), against Rubber Band
   stretching the whole clip at once, per speed:
   - mel-band level distance (dB RMS over 40 bands, 10 ms frames) near the block joins (±21 ms) and
     away from them; the same for blocks cut without context, crossfade or alignment ("hard cut");
   - the voice's fundamental band (60-400 Hz) in the 10 ms at each join relative to 20 ms either
     side (a dip means two renders cancelled), ours vs the whole-clip stretch at the same places;
   - chunking invariance (random chunk sizes vs one push), CPU cost (real-time factor), and how
     much input the first output waits for.
2. Time to first byte over HTTP (in-process server, tiny checkpoints, CPU): raw pcm (= TTFP at the
   HTTP level), mp3 / opus / aac streamed progressively (first byte, and first decodable audio),
   SSE's first delta, and pcm at speed 1.5. Medians over --runs requests, interleaved.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import threading
import time
from pathlib import Path

import numpy as np

from bench.lib.args import shared_data_dir
from bench.lib.audio_measures import join_distances, low_band_dips
from tts_core.audio import stretch as S

SR = 48_000


# ---- 1. stretch -----------------------------------------------------------------------------------


def _speech(data: Path) -> np.ndarray:
    import soundfile as sf
    import soxr

    parts = []
    for name in ("en_2.wav", "zh_1.wav"):
        audio, rate = sf.read(data / "presets" / name, dtype="float32", always_2d=True)
        parts.append(soxr.resample(audio[:, :1], rate, SR)[:, 0])
    mono = np.concatenate(parts)[: 12 * SR]
    return np.ascontiguousarray(np.stack([mono, mono]), dtype=np.float32)


def _hard_cut(pcm: np.ndarray, speed: float) -> np.ndarray:
    """The naive alternative: each block stretched alone, outputs butted together."""
    saved = S.CONTEXT_SAMPLES, S.CROSSFADE_SAMPLES, S.MAX_SHIFT_SAMPLES
    S.CONTEXT_SAMPLES, S.CROSSFADE_SAMPLES, S.MAX_SHIFT_SAMPLES = 0, 0, 0
    try:
        return S.stretch(pcm, speed)
    finally:
        S.CONTEXT_SAMPLES, S.CROSSFADE_SAMPLES, S.MAX_SHIFT_SAMPLES = saved


def measure_stretch(data: Path) -> list[dict]:
    from pedalboard import time_stretch

    speech = _speech(data)
    rng = np.random.default_rng(0)
    rows = []
    for speed in (0.5, 0.75, 1.25, 1.5, 2.0, 3.0, 4.0):
        started = time.process_time()
        ours = S.stretch(speech, speed)
        ours_cpu = time.process_time() - started
        started = time.process_time()
        whole = time_stretch(speech, SR, speed)
        whole_cpu = time.process_time() - started
        stretcher, parts, at = S.Stretcher(speed), [], 0
        while at < speech.shape[1]:
            size = int(rng.integers(1, 12_000))
            parts.append(stretcher.push(speech[:, at : at + size]))
            at += size
        parts.append(stretcher.flush())
        chunked_diff = float(np.abs(np.concatenate(parts, axis=1) - ours).max())
        joins = [round(S.block_edge(k) / speed) for k in range(1, 200) if S.block_edge(k) < speech.shape[1]]
        naive = _hard_cut(speech, speed)
        near, far = (float(d.mean()) for d in join_distances(ours, whole, joins, SR))
        naive_near, naive_far = (float(d.mean()) for d in join_distances(naive, whole, joins, SR))
        output_s = ours.shape[1] / SR
        rows.append({
            "speed": speed, "joins": len(joins),
            "mel_db_near_joins": round(near, 2), "mel_db_elsewhere": round(far, 2),
            "hard_cut_mel_db_near_joins": round(naive_near, 2), "hard_cut_mel_db_elsewhere": round(naive_far, 2),
            "f0_band_db_at_joins": round(float(low_band_dips(ours, joins, SR).mean()), 2),
            "whole_clip_f0_band_db_same_places": round(float(low_band_dips(whole[:, : ours.shape[1]], joins, SR).mean()), 2),
            "hard_cut_f0_band_db_at_joins": round(float(low_band_dips(naive, joins, SR).mean()), 2),
            "length_ok": ours.shape[1] == round(speech.shape[1] / speed),
            "chunked_vs_whole_max_abs_diff": chunked_diff,
            "cpu_rtf_ours": round(ours_cpu / output_s, 3), "cpu_rtf_whole_clip": round(whole_cpu / output_s, 3),
            "first_output_waits_for_input_ms": round(S.Stretcher(speed)._input_needed(0) / SR * 1000),
        })
    return rows


# ---- 2. time to first byte ------------------------------------------------------------------------


def _serve(data: Path):
    import uvicorn

    from studio.app import create_app
    from studio.service import SynthesizerService
    from studio.settings import ServerSettings
    from tts_core.config import EngineConfig
    from tts_core.synthesizer import Synthesizer

    parity = data / "parity"

    def factory(report):
        import tempfile

        return Synthesizer.from_pretrained(
            str(parity / "tiny_lm"), str(parity / "tiny_codec"), device="cpu",
            tokenizer=str(data / "hf_checkpoint_meta" / "tokenizer.model"), voices_dir=str(data / "presets"),
            cache_dir=tempfile.mkdtemp(prefix="measure-api-"), engine_config=EngineConfig(max_active_streams=1),
            allow_download=False, warmup=True, report=report)

    service = SynthesizerService(factory)
    service.start(background=False)
    if not service.wait(0):
        raise SystemExit(f"model failed to load: {service.error}")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(service, ServerSettings()), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, service


def _first_audio(fmt: str, data: bytes) -> bool:
    """Whether `data` (the stream so far) holds a complete, decodable audio packet."""
    if fmt == "opus":  # Ogg pages: the two header pages have granule 0, audio pages a positive one
        at = 0
        while (at := data.find(b"OggS", at)) >= 0 and at + 27 <= len(data):
            granule = struct.unpack_from("<q", data, at + 6)[0]
            segments = data[at + 26]
            size = 27 + segments + sum(data[at + 27 : at + 27 + segments])
            if granule > 0 and at + size <= len(data):
                return True
            at += 4
        return False
    import av

    codec = av.CodecContext.create("mp3" if fmt == "mp3" else "aac", "r")
    for packet in codec.parse(data):
        try:  # the mp3 stream starts with an ID3 tag, which the parser hands over as a bad packet
            if any(frame.samples for frame in codec.decode(packet)):
                return True
        except av.error.FFmpegError:
            continue
    return False


def _time_request(client, body: dict, fmt: str | None) -> dict:
    started = time.perf_counter()
    first_byte = first_audio = None
    received = b""
    with client.stream("POST", "/v1/audio/speech", json=body) as resp:
        resp.raise_for_status()
        for piece in resp.iter_bytes():
            now = time.perf_counter() - started
            if first_byte is None and piece:
                first_byte = now
            received += piece
            if fmt is not None and first_audio is None and _first_audio(fmt, received):
                first_audio = now
    return {"first_byte_s": first_byte, "first_audio_s": first_audio if fmt else first_byte,
            "total_s": time.perf_counter() - started}


def measure_ttfb(data: Path, runs: int) -> dict:
    import httpx

    url, server, service = _serve(data)
    text = "Streaming speech arrives while it is being generated, one small piece after another."
    cases = {
        "pcm (TTFP)": ({"response_format": "pcm", "stream_format": "audio"}, None),
        "mp3": ({"response_format": "mp3", "stream_format": "audio"}, "mp3"),
        "opus": ({"response_format": "opus", "stream_format": "audio"}, "opus"),
        "aac": ({"response_format": "aac", "stream_format": "audio"}, "aac"),
        "sse pcm (first delta)": ({"stream_format": "sse"}, None),
        "pcm, speed 1.5": ({"response_format": "pcm", "stream_format": "audio", "speed": 1.5}, None),
    }
    results: dict[str, list[dict]] = {name: [] for name in cases}
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            for run in range(runs):
                for name, (fields, fmt) in cases.items():
                    body = {"input": text, "voice": "alloy", "seed": run, "max_frames": 40, **fields}
                    results[name].append(_time_request(client, body, fmt))
    finally:
        server.should_exit = True
        service.close()
    summary = {}
    for name, rows in results.items():
        summary[name] = {key: round(statistics.median(r[key] for r in rows) * 1000, 1)
                         for key in ("first_byte_s", "first_audio_s", "total_s")}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=shared_data_dir())
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    out: dict = {"stretch": measure_stretch(args.data)}
    print("speed joins | mel dB near/else (hard cut) | F0 band dB at joins: ours / whole clip / hard cut | "
          "CPU RTF ours/whole | first output waits")
    for r in out["stretch"]:
        print(f"{r['speed']:>5} {r['joins']:>5} | {r['mel_db_near_joins']:.2f}/{r['mel_db_elsewhere']:.2f} "
              f"({r['hard_cut_mel_db_near_joins']:.2f}/{r['hard_cut_mel_db_elsewhere']:.2f}) | "
              f"{r['f0_band_db_at_joins']:+.2f} / {r['whole_clip_f0_band_db_same_places']:+.2f} / "
              f"{r['hard_cut_f0_band_db_at_joins']:+.2f} | {r['cpu_rtf_ours']:.3f}/{r['cpu_rtf_whole_clip']:.3f} | "
              f"{r['first_output_waits_for_input_ms']} ms  (length ok {r['length_ok']}, "
              f"chunked diff {r['chunked_vs_whole_max_abs_diff']:g})")
    if not args.skip_http:
        out["ttfb_ms"] = measure_ttfb(args.data, args.runs)
        print(f"\nmedian of {args.runs} runs, ms: first byte | first decodable audio | whole response")
        for name, row in out["ttfb_ms"].items():
            print(f"  {name:<24} {row['first_byte_s']:>8.1f} {row['first_audio_s']:>8.1f} {row['total_s']:>9.1f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
