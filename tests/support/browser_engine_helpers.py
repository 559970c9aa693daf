"""The static build of the tiny checkpoints; its server (`serve_static`, with the cross-origin
isolation headers) is `bench.lib.static_site`'s.

`tiny_build()` exports once per test process (ONNX export takes about a minute here), into a
temporary folder removed at exit; every browser-engine test module shares it.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from bench.lib.static_site import serve_static  # noqa: F401 (bench/browser_engine.py imports it from here)

DATA = Path(__file__).resolve().parents[3] / "shared" / "moss_tts_nano_data"


@functools.cache
def tiny_build(data_dir: Path) -> Path:
    """`export-web` of the tiny parity checkpoints (fp32), built once per process."""
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
               options=ExportOptions(max_rows=1024))
    return out
