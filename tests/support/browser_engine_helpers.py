"""The static build of the tiny checkpoints, served as `python -m tts_core serve-web` serves it
(the cross-origin isolation headers of its Space front matter: wasm threads need them).

`tiny_build()` exports once per test process (fp32 for exactness, fp16 for the self-test of the
WebGPU graphs, which wasm can run too), into a temporary folder removed at exit; every
browser-engine test module shares it.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from tts_core.export.serve import serve_static

__all__ = ["serve_static", "tiny_build"]


@functools.cache
def tiny_build(data_dir: Path) -> Path:
    """`export-web` of the tiny parity checkpoints (fp32 and fp16), built once per process."""
    from tts_core.export.onnx_export import ExportOptions
    from tts_core.export.web import export_web
    from tts_core.model.codec_loading import load_codec
    from tts_core.model.lm_loading import load_lm

    root = Path(tempfile.mkdtemp(prefix="moss-web-"))
    atexit.register(shutil.rmtree, root, True)
    parity = data_dir / "parity"
    out = root / "site"
    export_web(out, load_lm(parity / "tiny_lm"), load_codec(parity / "tiny_codec"), codec_dir=parity / "tiny_codec",
               tokenizer=data_dir / "hf_checkpoint_meta" / "tokenizer.model", voices_dir=data_dir / "presets",
               options=ExportOptions(precisions=("fp32", "fp16"), max_rows=1024))
    return out
