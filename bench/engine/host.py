"""Host ceiling of the engine: `Engine` over a runner that does no model work, so what is measured is
the Python side alone (scheduling, step bookkeeping, chunk grouping, emitting, one caller thread per
stream as in `python -m bench.engine`). Steps return at once with codes that never stop; decodes
hand back one fresh [2, 3840 n] array per stream, as the GPU runner does. The engine runs as on a
GPU: step-ahead on, codec work on its own thread.

Figures per level, median of `--repeats` runs (min-max): x real time, TTFP p50/p95, and the host
CPU time per stream-frame (all threads of the process). At 256 streams on the H200 host the real
engine reaches about 1,400x real time; where this ceiling is near that, the host is what bounds it.
`--switch-intervals-ms 5,1` compares the interpreter's thread switch intervals (how long a thread
that wants the interpreter lock may wait for the one holding it), one run of each in turn per repeat.

    python -m bench.engine.host --switch-intervals-ms 5,1 --json bench/results/engine-host-cpu.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from bench.lib.machine import machine_info
from bench.lib.record import new_record, write_record
from bench.lib.streams import run_streams, spread, summarize_run
from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.engine import Engine
from tts_core.engine.host_copy import ReadyPcm
from tts_core.engine.stream import Segment, Stream
from tts_core.types import SAMPLE_RATE_HZ, SAMPLES_PER_FRAME

N_VQ = 16
DEFAULT_SWITCH_INTERVAL_S = sys.getswitchinterval()
PROMPT_ROWS = 200


@dataclass(frozen=True, slots=True)
class _Ticket:
    slots: list[int]
    result: tuple[np.ndarray, np.ndarray]


class NullRunner:
    """The runner interface the engine uses (`runner_types.LaunchingRunner`, as the GPU's runner),
    with no model behind it."""

    can_step_ahead = True
    step_kind = "none"
    uses_graphs = False
    compile_mode = "off"

    def __init__(self, num_slots: int, context_rows: int = 2048):
        self.num_slots = num_slots
        self.device = torch.device("cpu")
        self._context = context_rows
        self._lengths = [0] * num_slots
        self._launched: deque[_Ticket] = deque()
        self._audio = np.ones((2, 8 * SAMPLES_PER_FRAME), np.float32)  # source of the per-stream copies

    def start(self, wait_quiet, when_idle) -> None:
        return None

    def begin_stream(self, slot: int, sampling, seed: int) -> None:
        self._lengths[slot] = 0

    def start_segment(self, slot: int, rows, prime_codes, prefix_rows: int = 0) -> None:
        self._lengths[slot] = len(rows)

    def upgrade(self) -> None:
        raise RuntimeError("nothing to upgrade to")

    def launch(self, slots) -> _Ticket:
        slots = list(slots)
        ticket = _Ticket(slots, (np.ones(len(slots), bool), np.zeros((len(slots), N_VQ), np.int64)))
        self._launched.append(ticket)
        return ticket

    def collect(self, ticket: _Ticket, keep=None):
        assert self._launched.popleft() is ticket
        for i, slot in enumerate(ticket.slots):
            if keep is None or keep[i]:
                self._lengths[slot] += 1
        return ticket.result

    def step(self, slots):
        return self.collect(self.launch(slots))

    def drop_launched(self) -> None:
        self._launched.clear()

    def decode(self, slots, codes: np.ndarray) -> list[np.ndarray]:
        return self.decode_async(slots, codes).result()

    def decode_async(self, slots, codes: np.ndarray) -> ReadyPcm:
        samples = codes.shape[1] * SAMPLES_PER_FRAME
        source = self._audio if samples <= self._audio.shape[1] else np.ones((2, samples), np.float32)
        return ReadyPcm([source[:, :samples].copy() for _ in slots])

    def release(self, slot: int) -> None:
        self._lengths[slot] = 0

    def context_left(self, slot: int) -> int:
        return self._context - self._lengths[slot]

    def warm_prefix(self, rows) -> bool:
        return False


class _Submitter:
    """What `run_streams` calls: `stream(seed)` submits a stream to the engine and yields its chunks."""

    def __init__(self, engine: Engine, segments: tuple[Segment, ...]):
        self.engine = engine
        self.segments = segments

    def stream(self, seed: int):
        return self.engine.submit(Stream(segments=self.segments, sampling=SamplingParams(), seed=seed))


def run_level(streams: int, frames: int) -> dict:
    """One run: every stream starts at once (one caller thread each), timed as the GPU bench times
    its callers (`bench.lib.streams`); plus the host CPU time of the whole process."""
    engine = Engine(NullRunner(streams), EngineConfig(max_active_streams=streams, max_queue=0, pipeline_codec=True))
    rows = np.zeros((PROMPT_ROWS, 1 + N_VQ), np.int64)
    segments = (Segment(rows=rows, max_frames=frames),)
    cpu = time.process_time()
    try:
        timings, wall = run_streams(_Submitter(engine, segments), list(range(streams)))
    finally:
        engine.close()
    cpu = time.process_time() - cpu
    assert all(round(t.audio_s * SAMPLE_RATE_HZ) == frames * SAMPLES_PER_FRAME for t in timings), "a stream lost audio"
    summary = summarize_run(timings, wall)
    return {"x_realtime": round(summary["x_realtime"], 1), "ttfp_p50_ms": summary["ttfp_p50_ms"],
            "ttfp_p95_ms": summary["ttfp_p95_ms"], "cpu_us_per_stream_frame": round(1e6 * cpu / (streams * frames), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--switch-intervals-ms", default="5",
                        help="the interpreter's thread switch intervals to compare (sys.setswitchinterval; "
                             "Python's default is 5 ms), one run of each in turn per repeat")
    parser.add_argument("--json")
    parser.add_argument("--note", action="append", help="a note kept in the record")
    args = parser.parse_args()
    intervals = [float(x) for x in args.switch_intervals_ms.split(",")]
    if not all(x > 0 for x in intervals):
        raise SystemExit(f"--switch-intervals-ms must all be > 0, got {args.switch_intervals_ms}")
    levels = []
    for streams in (int(s) for s in args.streams.split(",")):
        run_level(streams, min(args.frames, 8))  # warm-up
        runs: dict[float, list[dict]] = {x: [] for x in intervals}
        for _ in range(args.repeats):  # the settings take turns, so drift on the machine hits them alike
            for interval in intervals:
                sys.setswitchinterval(interval / 1000)
                runs[interval].append(run_level(streams, args.frames))
        sys.setswitchinterval(DEFAULT_SWITCH_INTERVAL_S)
        for interval, got in runs.items():
            row = {"streams": streams, "frames": args.frames, "repeats": args.repeats, "switch_interval_ms": interval,
                   **{key: spread([r[key] for r in got]) for key in got[0]}, "runs": got}
            print({k: v for k, v in row.items() if k != "runs"}, flush=True)
            levels.append(row)
    record = new_record("engine_host", args, machine_info([torch.device("cpu")]), {"step_ahead": True,
                        "pipeline_codec": True})
    record["levels"] = levels
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
