"""The CPU engine's cost per audio second with several streams: three runners side by side.

    python -m bench.engine.cpu_batching --models full --streams 1,2,4 --json bench/results/cpu-batching-full.json
    python -m bench.engine.cpu_batching --models tiny --streams 1,2,4,8 --json bench/results/cpu-batching-tiny.json

Runners, each on its own copy of the same models (`EagerRunner` swaps linears in place):

- `batched-inexact`: the CPU runner before it was made exact: one batched LM step over the active
  slots (MKL products, attention padded to the longest slot) and one codec call per decode over the
  band of slots, as many frames as the pacing hands it. A stream's audio depends on its neighbours
  and on the clock; kept here as the baseline.
- `per-slot`: each slot steps with one row and decodes one frame per call on its own
  (`PerSlotRunner`, the fallback `EagerRunner` takes where rows are not independent): exact, no batching.
- `rows`: the batched exact runner (`EagerRunner()`: row-independent linears, each row attending
  alone; docs/ARCHITECTURE.md, "Two runners").

N concurrent `Synthesizer.stream` calls through a real `Engine` (the codec on its own thread when
the machine has 2 cores, as the server runs). Figure: process CPU seconds (every thread, from
`resource.getrusage`) per second of audio made, so other work on a shared machine counts less
than in wall time; wall RTF is recorded too. Runs alternate between the runners (the order rotates
each repeat) after one warm-up run each; medians over `--repeats`. The 1-minute load average at
the start and end of each level is recorded (the machine may be shared).
"""

from __future__ import annotations

import argparse
import copy
import os
import resource
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from bench.engine.levels import BENCH_TEXT, bench_synthesizer
from bench.lib.args import default_config_path
from bench.lib.machine import machine_info
from bench.lib.models import build_random_models, voice_codes
from bench.lib.record import new_record, write_record
from bench.lib.streams import run_streams, spread
from tts_core.config import EngineConfig, SamplingParams
from tts_core.engine.cpu import EagerRunner
from tts_core.engine.engine import Engine
from tts_core.engine.host_copy import ReadyPcm
from tts_core.engine.sampler import batch_for_frame
from tts_core.model.quant import quantize_codec, quantize_lm
from tts_core.tokenizer import TextTokenizer
from tts_core.types import SynthesisRequest, Voice

RUNNERS = ("batched-inexact", "per-slot", "rows")
CONTEXT_ROWS = 512


class PerSlotRunner(EagerRunner):
    """Each slot steps with one row and decodes one frame per call (the CPU runner's fallback)."""

    def _prepare_batching(self) -> bool:
        return False


class BatchedInexactRunner(PerSlotRunner):
    """The CPU runner as it was before a stream's audio was made its own (the baseline)."""

    def __init__(self, lm, codec, **kwargs):
        super().__init__(lm, codec, **kwargs)
        with torch.inference_mode():
            self.local = lm.new_local_cache(self.num_slots, self.device)

    @torch.inference_mode()
    def step(self, slots):
        slots = list(slots)
        samplers = [self.samplers[s] for s in slots]
        slot_index = torch.as_tensor(slots, dtype=torch.long)
        is_continue, codes = self.lm.generate_frame(self.hidden[slot_index], batch_for_frame(samplers),
                                                    local=self.local)
        go_host, codes_host = is_continue.numpy(), codes.numpy().astype(np.int64)
        going = [i for i, flag in enumerate(go_host) if flag and self.context_left(slots[i]) > 0]
        if going:
            go_slots = slot_index[torch.as_tensor(going)]
            self.hidden[go_slots] = self.lm.decode(codes[going], self.cache, go_slots)
            for i in going:
                samplers[i].observe(codes_host[i])
                self.lengths[slots[i]] += 1
        return go_host.astype(bool), codes_host

    @torch.inference_mode()
    def decode_async(self, slots, codes):
        return ReadyPcm(self._decode_band(slots, codes))


def build_runner(name: str, models, slots: int):
    lm, codec = copy.deepcopy(models[0]), copy.deepcopy(models[1])
    kwargs = dict(num_slots=slots, max_context_rows=CONTEXT_ROWS, device="cpu")
    if name == "batched-inexact":
        return BatchedInexactRunner(lm, codec, **kwargs)
    runner = (EagerRunner if name == "rows" else PerSlotRunner)(lm, codec, **kwargs)
    if name == "rows" and not runner.batched:
        raise SystemExit("this machine does not compute rows independently: the rows runner would not batch")
    return runner


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(synth, streams: int, frames: int, run: int, ref_frames: int) -> dict:
    voice = Voice.from_codes(voice_codes(ref_frames, 0))  # one voice: its prompt prefix is cached after the warm-up
    requests = [SynthesisRequest(text=BENCH_TEXT, voice=voice, mode="voice_clone", sampling=SamplingParams(),
                                 seed=1000 + 100 * run + i, max_frames=frames) for i in range(streams)]
    started = cpu_seconds()
    timings, wall_s = run_streams(synth, requests)
    cpu_s = cpu_seconds() - started
    audio_s = sum(t.audio_s for t in timings)
    return {"cpu_s_per_audio_s": round(cpu_s / audio_s, 4), "rtf_p50": round(statistics.median(
        t.elapsed_s / t.audio_s for t in timings), 4), "audio_s": round(audio_s, 3), "wall_s": round(wall_s, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", choices=("tiny", "full"), default="full",
                        help="tiny: the parity checkpoints; full: full-size random weights from the real configs")
    parser.add_argument("--streams", default="1,2,4")
    parser.add_argument("--frames", type=int, default=None, help="frames per stream (default 32 full, 60 tiny)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--runners", default=",".join(RUNNERS))
    parser.add_argument("--quantize", choices=("fp16", "int8"), default=None, help="CPU weight mode (default fp32)")
    parser.add_argument("--json")
    parser.add_argument("--note", action="append")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    meta = default_config_path("hf_checkpoint_meta", "config.json")
    if meta is None:
        raise SystemExit("the shared data directory is missing (set MOSS_TTS_PARITY_DIR)")
    data = Path(meta).parents[1]
    frames = args.frames or (32 if args.models == "full" else 60)
    tokenizer = TextTokenizer.from_file(str(data / "hf_checkpoint_meta" / "tokenizer.model"))
    if args.models == "full":
        models = build_random_models(str(data / "hf_checkpoint_meta" / "config.json"),
                                     str(data / "codec" / "config.json"), torch.device("cpu"), torch.float32)
    else:
        from tts_core.model.codec_loading import load_codec
        from tts_core.model.lm_loading import load_lm

        models = (load_lm(data / "parity" / "tiny_lm"), load_codec(data / "parity" / "tiny_codec"))
    if args.quantize:
        models = (quantize_lm(models[0], args.quantize), quantize_codec(models[1], args.quantize))
    runners = args.runners.split(",")
    levels = [int(s) for s in args.streams.split(",")]
    record = new_record("cpu-batching", args, machine_info([torch.device("cpu")]),
                        {"models": args.models, "quantize": args.quantize, "frames": frames, "threads": args.threads,
                         "runners": runners,
                         "context_rows": CONTEXT_ROWS, "sampling": "default", "voice": "warm (prefix cached)"})
    record["levels"] = []
    with tempfile.TemporaryDirectory(prefix="moss-cpu-batching-") as cache:
        for streams in levels:
            load_before = round(os.getloadavg()[0], 2)
            config = EngineConfig(max_active_streams=streams, max_queue=0, max_context_rows=CONTEXT_ROWS)
            synths = {}
            for name in runners:
                engine = Engine(build_runner(name, models, streams), config)
                synths[name] = bench_synthesizer(engine, tokenizer, config, models[0].config, Path(cache))
            ref_frames = 40
            runs: dict[str, list[dict]] = {name: [] for name in runners}
            try:
                for name in runners:
                    one_run(synths[name], streams, min(frames, 8), -1, ref_frames)  # warm-up
                for rep in range(args.repeats):
                    order = runners[rep % len(runners):] + runners[: rep % len(runners)]
                    for name in order:
                        runs[name].append(one_run(synths[name], streams, frames, rep, ref_frames))
            finally:
                for synth in synths.values():
                    synth.close()
            level = {"streams": streams, "load_average_1m": [load_before, round(os.getloadavg()[0], 2)], "runners": {
                name: {"cpu_s_per_audio_s": spread([r["cpu_s_per_audio_s"] for r in rs]),
                       "rtf_p50": spread([r["rtf_p50"] for r in rs]), "runs": rs} for name, rs in runs.items()}}
            record["levels"].append(level)
            print(f"{streams} stream(s): " + "; ".join(
                f"{name} {level['runners'][name]['cpu_s_per_audio_s']['median']:.3f} CPU s/audio s"
                for name in runners), flush=True)
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
