"""`python -m tts_core bench`: TTFP / RTF / throughput / memory with full-size random weights.

Models are built from the real config.json files (no download), with random weights engineered so
the LM never stops by itself; every stream asks for exactly `--frames` frames of a voice-clone
request whose prompt has `--prompt-rows` rows. Requests go through `Synthesizer.stream()` (text
normalisation, tokenizer, prompt building, the real engine with its scheduler, batched LM steps and
batched streaming codec decode), so TTFP is what a caller of `stream()` waits for. Figures only:
nothing here asserts a timing. `--json FILE` writes one record (machine, date, arguments, per-level
medians with min-max over `--repeats` runs); `scripts/render_figures.py` turns such records into
the tables of docs/PERFORMANCE.md.

Modules: args (command line), models (random full-size models, prompts), machine (what ran it),
memory (peak memory per level), streams (timed concurrent streams), extras (components, int8
fidelity), record (the JSON record and its printout), run (the orchestration).
"""

from .args import add_bench_args, default_config_path
from .extras import time_components
from .models import build_random_models, make_prompt
from .run import run_bench

__all__ = ["add_bench_args", "build_random_models", "default_config_path", "make_prompt",
           "run_bench", "time_components"]
