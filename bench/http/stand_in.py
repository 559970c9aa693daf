"""A stand-in device for the load bench: the server as on a GPU host, on any machine.

On a GPU the engine thread mostly waits for the device (the interpreter lock released) and the
host's cores carry the delivery: the pumps, the event loop, the encoders, every chunk of every
listener. On this project's CPU machines the tiny model's own compute hides all of that. With
`python -m bench.http.load --stand-in STEP_MS,DECODE_MS` the server (and the in-process twin) run
the real engine, synthesizer, routes, delivery and encoders over `StandInRunner`: a runner whose
LM step is ready STEP_MS after its launch and whose codec decode is ready DECODE_MS after it was
queued (sleeps: the lock is released, as in a wait on a device), each on a queue of its own as
the GPU runner's two streams, and whose audio is a real speech clip (so the encoders work as on
speech). What it measures is the host side alone: how much of what such an engine makes the
server delivers, per format, and what each chunk costs the server's Python. It is a ceiling
bench like `bench/engine/host.py` (whose no-work runner it extends), not a model of the GPU's
figures: steps do not slow down with more rows.

    python -m bench.http.stand_in --step-ms 4 --decode-ms 8 -- app.py --lm ... (what load.py runs)
"""

from __future__ import annotations

import argparse
import runpy
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench.engine.host import NullRunner
from tts_core.types import SAMPLES_PER_FRAME

SPEECH_CLIP = "en_3.wav"  # 48 kHz: no resampling at start-up


class _Due:
    """What a stand-in decode hands back: the rows, once the device time has passed."""

    def __init__(self, rows: list[np.ndarray], ready_at: float):
        self._rows, self._ready_at = rows, ready_at

    def result(self) -> list[np.ndarray]:
        delay = self._ready_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return self._rows


class StandInRunner(NullRunner):
    """`NullRunner` with device time: see the module docstring. `audio`: float32 [2, n] speech."""

    def __init__(self, num_slots: int, *, step_s: float, decode_s: float, audio: np.ndarray, context_rows: int = 2048):
        super().__init__(num_slots, context_rows)
        self.step_s, self.decode_s = step_s, decode_s
        self._speech = np.ascontiguousarray(audio, dtype=np.float32)
        self._offsets = [0] * num_slots  # where each slot is in the clip
        self._lock = threading.Lock()
        self._lm_free = self._codec_free = 0.0  # when each stand-in queue has done its work
        self._ready_at: dict[int, float] = {}  # id(ticket) -> ready time

    def _queue(self, free: float, cost_s: float) -> float:
        return max(time.monotonic(), free) + cost_s

    def launch(self, slots):
        ticket = super().launch(slots)
        with self._lock:
            self._lm_free = self._queue(self._lm_free, self.step_s)
            self._ready_at[id(ticket)] = self._lm_free
        return ticket

    def collect(self, ticket, keep=None):
        with self._lock:
            ready_at = self._ready_at.pop(id(ticket), 0.0)
        delay = ready_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return super().collect(ticket, keep)

    def drop_launched(self) -> None:
        super().drop_launched()
        with self._lock:
            self._ready_at.clear()

    def begin_stream(self, slot: int, sampling, seed: int) -> None:
        super().begin_stream(slot, sampling, seed)
        self._offsets[slot] = (seed * 7 * SAMPLES_PER_FRAME) % max(1, self._speech.shape[1] - 8 * SAMPLES_PER_FRAME)

    def decode_async(self, slots, codes: np.ndarray) -> _Due:
        samples = codes.shape[1] * SAMPLES_PER_FRAME
        rows = []
        for slot in slots:
            start = self._offsets[slot]
            if start + samples > self._speech.shape[1]:
                start = 0
            rows.append(self._speech[:, start:start + samples].copy())
            self._offsets[slot] = start + samples
        with self._lock:
            self._codec_free = self._queue(self._codec_free, self.decode_s)
            ready_at = self._codec_free
        return _Due(rows, ready_at)


def speech(voices_dir: str | Path) -> np.ndarray:
    """A preset clip at 48 kHz stereo, looped to at least 10 s: the stand-in's audio."""
    from tts_core.audio.io import load_audio, to_codec_input

    wav, rate = load_audio(str(Path(voices_dir) / SPEECH_CLIP))
    clip = to_codec_input(wav, rate)
    return np.tile(clip, (1, -(-10 * 48000 // clip.shape[1])))


def install(step_ms: float, decode_ms: float, voices_dir: str | Path) -> None:
    """From now on, engines built by `tts_core.loader` run on the stand-in device (this process)."""
    import tts_core.loader as loader

    audio = speech(voices_dir)

    def build_runner(lm, codec, *, num_slots: int, **_ignored):
        return StandInRunner(num_slots, step_s=step_ms / 1000, decode_s=decode_ms / 1000, audio=audio)

    loader.build_runner = build_runner


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step-ms", type=float, required=True)
    p.add_argument("--decode-ms", type=float, required=True)
    p.add_argument("app", nargs=argparse.REMAINDER, help="-- app.py and its flags")
    args = p.parse_args()
    app = [a for a in args.app if a != "--"] if args.app[:1] == ["--"] else args.app
    voices = app[app.index("--voices-dir") + 1]
    install(args.step_ms, args.decode_ms, voices)
    sys.argv = app
    runpy.run_path(app[0], run_name="__main__")


if __name__ == "__main__":
    main()
