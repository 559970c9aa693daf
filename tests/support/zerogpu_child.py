"""ZeroGPU's flow on a real GPU, run as a script in a fresh interpreter by
`tests/gpu/test_zerogpu_gpu.py`: CUDA is never initialised in this process, as in a Space's main
process, while every generation runs in the harness's forked GPU workers. (Inside a pytest session
that already used CUDA a fork could not use the GPU, so the test starts this instead.)

usage: PYTHONPATH=. python tests/support/zerogpu_child.py DATA_DIR AOTI_CACHE_DIR  -> one JSON line on stdout
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from studio.zerogpu.aoti import failed_reason
from studio.zerogpu.harness import GPU, parent_cuda_initialized
from studio.zerogpu.worker import load_gpu_weights, make_gpu_stream, place_weights
from tts_core import SynthesisRequest, Synthesizer
from tts_core.config import EngineConfig, SamplingParams


def codes_of(chunks) -> list:
    return np.concatenate([c.codes for c in chunks if len(c.codes)]).tolist()


def main(data: Path, aoti_dir: Path) -> dict:
    parity = data / "parity"
    synth = Synthesizer.from_pretrained(
        str(parity / "tiny_lm"), str(parity / "tiny_codec"), device="cpu",
        tokenizer=str(data / "hf_checkpoint_meta" / "tokenizer.model"), voices_dir=data / "presets",
        engine_config=EngineConfig(max_active_streams=1), warmup=False, allow_download=False)
    models = parity / "tiny_lm", parity / "tiny_codec"
    plain = place_weights(load_gpu_weights(*models, dtype="float32"), "harness")
    compiled = place_weights(load_gpu_weights(*models, dtype="float32", aoti_dir=str(aoti_dir)), "harness")
    eager_stream, aoti_stream = make_gpu_stream(lambda: plain, GPU), make_gpu_stream(lambda: compiled, GPU)
    request = SynthesisRequest(text="Hello there, this is a test of the worker.", seed=3, max_frames=12,
                               sampling=SamplingParams.greedy())
    try:
        eager = list(eager_stream(synth.build(request)))
        again = list(eager_stream(synth.build(request)))  # the same worker, its weights already moved
        aoti = list(aoti_stream(synth.build(request)))
    finally:
        eager_stream.close_workers()
        aoti_stream.close_workers()
        synth.close()
    first, second = eager_stream.usage[-2:]
    return {"eager_codes": codes_of(eager), "again_codes": codes_of(again), "aoti_codes": codes_of(aoti),
            "first_moved_bytes": first.moved_bytes, "first_move_s": first.move_s,
            "second_moved_bytes": second.moved_bytes,
            "packages": sorted(p.name.split("-")[0] for p in aoti_dir.rglob("*.pt2")),
            # A package that loaded in its check process gets an `.ok` marker; one that did not stays eager.
            "loaded": sorted(p.name.split("-")[0] for p in aoti_dir.rglob("*.ok")),
            # Why each of the others did not load: its check's reason, kept beside it (no new check).
            "load_problems": {p.name.split("-")[0]: failed_reason(p) or "not checked"
                              for p in sorted(aoti_dir.rglob("*.pt2")) if not p.with_suffix(".ok").is_file()},
            "parent_cuda_initialized": parent_cuda_initialized()}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))), flush=True)
