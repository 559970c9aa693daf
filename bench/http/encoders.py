"""Encoder speed and quality on real speech, for bench/http/load.py's record.

Ten seconds of two preset clips (48 kHz stereo) go through `encoders.StreamEncoder` as the server
sends them (in 80 ms pieces), for every compressed format, and through libmp3lame at each LAME
quality level (FFmpeg's `compression_level`, 0 = slowest/best ... 9 = fastest) at the server's bit
rate. Per case: CPU seconds per audio second in one thread (best of 3), and the decoded audio
against the source: SNR (dB) and the mean mel-band level distance (dB, 40 bands), after aligning
the decoder's delay. The server's choice must cost no quality against LAME's default (level 3).

Run alone, it also measures whether PyAV releases the interpreter lock while it encodes (a pure
Python thread's progress beside an encoding thread, against alone: near 1 = released, near 0.5 or
below = held), and writes its own record:

    python -m bench.http.encoders --json bench/results/encoders-cpu.json
"""

from __future__ import annotations

import argparse
import io
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench.lib.args import shared_data_dir
from bench.lib.audio_measures import mel_band_db
from tts_core.audio.encoders import StreamEncoder

SR = 48_000
PIECE = 3840  # one codec frame, as the engine hands them out


def speech(data: Path, seconds: float = 10.0) -> np.ndarray:
    import soundfile as sf
    import soxr

    parts = []
    for name in ("en_2.wav", "zh_1.wav"):
        audio, rate = sf.read(data / "presets" / name, dtype="float32", always_2d=True)
        parts.append(soxr.resample(audio, rate, SR))
    both = np.concatenate([np.repeat(p[:, :1], 2, axis=1) if p.shape[1] == 1 else p[:, :2] for p in parts])
    return np.ascontiguousarray(both[: int(seconds * SR)].T, dtype=np.float32)


def _decode(data: bytes) -> np.ndarray:
    import av

    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray() for f in container.decode(audio=0)]
    out = np.concatenate(frames, axis=1).astype(np.float32)
    return out if out.shape[0] == 2 else np.repeat(out, 2, axis=0)


def _aligned(decoded: np.ndarray, source: np.ndarray, max_lag: int = 4096) -> np.ndarray:
    """`decoded` shifted by the lag that best matches `source` (encoders add a few ms of delay)."""
    probe = source[0, SR: SR + SR // 2]
    window = decoded[0, SR: SR + SR // 2 + max_lag]
    scores = np.correlate(window, probe, mode="valid")
    lag = int(np.argmax(scores))
    out = decoded[:, lag:]
    return out[:, : source.shape[1]]


def quality(source: np.ndarray, data: bytes) -> dict:
    decoded = _aligned(_decode(data), source)
    n = min(decoded.shape[1], source.shape[1])
    ref, got = source[:, :n], decoded[:, :n]
    snr = 10 * np.log10(float((ref**2).sum()) / max(float(((got - ref) ** 2).sum()), 1e-12))
    mel = float(np.abs(mel_band_db(got, SR) - mel_band_db(ref, SR)).mean())
    return {"snr_db": round(snr, 2), "mel_db": round(mel, 3)}


def _timed(encode) -> tuple[bytes, float]:
    best, data = None, b""
    for _ in range(3):
        started = time.thread_time()
        data = encode()
        spent = time.thread_time() - started
        best = spent if best is None else min(best, spent)
    return data, float(best)


def _served(source: np.ndarray, fmt: str) -> bytes:
    encoder = StreamEncoder(fmt, SR, 2)
    out = b"".join(encoder.encode(source[:, i: i + PIECE]) for i in range(0, source.shape[1], PIECE))
    return out + encoder.finish()


def _lame(source: np.ndarray, level: int, bit_rate: int) -> bytes:
    from fractions import Fraction

    import av

    sink = io.BytesIO()
    with av.open(sink, "w", format="mp3") as container:
        stream = container.add_stream("libmp3lame", rate=SR, layout="stereo",
                                      options={"compression_level": str(level)})
        stream.bit_rate = bit_rate
        for at in range(0, source.shape[1], PIECE):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(source[:, at: at + PIECE]), format="fltp",
                                               layout="stereo")
            frame.sample_rate, frame.pts, frame.time_base = SR, at, Fraction(1, SR)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return sink.getvalue()


def encoder_check(data_dir: Path) -> dict:
    from tts_core.audio.encoders import pyav_settings

    source = speech(data_dir)
    seconds = source.shape[1] / SR
    served = {}
    for fmt in ("mp3", "opus", "aac", "flac"):
        data, cpu = _timed(lambda fmt=fmt: _served(source, fmt))
        served[fmt] = {"cpu_s_per_audio_s": round(cpu / seconds, 5), "kbit_s": round(8 * len(data) / seconds / 1000),
                       **({} if fmt == "flac" else quality(source, data)), "settings": pyav_settings(fmt)}
    bit_rate = pyav_settings("mp3")["bit_rate_per_channel"] * 2
    lame = {}
    for level in (0, 2, 3, 5, 7, 9):
        data, cpu = _timed(lambda level=level: _lame(source, level, bit_rate))
        lame[str(level)] = {"cpu_s_per_audio_s": round(cpu / seconds, 5), **quality(source, data)}
    return {"audio_s": seconds, "served": served, "lame_levels": lame, "lame_bit_rate": bit_rate}


def _spin(seconds: float) -> int:
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        count += 1
    return count


def gil_check(source: np.ndarray, seconds: float = 1.0, rounds: int = 5) -> dict:
    """Per format: a Python thread's loop count beside a thread encoding that format non-stop, over
    its count alone just before; the median of `rounds` such pairs. 1.0 = the encoder never held
    the interpreter lock (on a machine with a core free for each thread)."""
    out = {}
    for fmt in ("mp3", "aac", "opus"):
        ratios = []
        for _ in range(rounds):
            alone = _spin(seconds)
            stop = threading.Event()

            def encode(fmt: str = fmt, stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    _served(source[:, : SR * 2], fmt)

            worker = threading.Thread(target=encode, daemon=True)
            worker.start()
            ratios.append(_spin(seconds) / alone)
            stop.set()
            worker.join()
        out[fmt] = round(float(np.median(ratios)), 3)
    return out


def main() -> None:
    from bench.lib.machine import machine_info
    from bench.lib.record import command_line, new_record, write_record

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=shared_data_dir())
    parser.add_argument("--json", default=None)
    parser.add_argument("--note", action="append")
    args = parser.parse_args()
    recorded = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "data"})
    record = new_record("encoder_check", recorded, machine_info([]), {"pieces": PIECE, "sample_rate": SR})
    argv = [a for i, a in enumerate(sys.argv) if a != "--data" and (i == 0 or sys.argv[i - 1] != "--data")]
    record["command"] = command_line(argv)
    record["encoders"] = encoder_check(args.data)
    record["gil_progress_beside_encoder"] = gil_check(speech(args.data))
    print(record["gil_progress_beside_encoder"])
    if args.json:
        write_record(record, args.json)


if __name__ == "__main__":
    main()
