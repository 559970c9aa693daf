"""Speed of the in-browser engine (headless Chromium, onnxruntime-web wasm) per precision, side by
side in one run with the torch CPU engine on the same machine, full-size weights.

    python -m tts_core make-random-checkpoint /tmp/full        # full-size random weights (no download)
    python bench/browser_engine.py --lm /tmp/full/lm --codec /tmp/full/codec \\
        --json bench/results/browser-engine-cpu.json

For each precision: `export-web` of the checkpoints (one preset voice, to keep the build short),
served with COOP/COEP by a plain static server; the page loads the model (download size and load
time recorded), then one warm-up request and `--repeats` measured ones, greedy, `--frames` frames:
TTFP = stream() called -> first audio item, RTF = elapsed / audio seconds. The torch row is
`Synthesizer.synthesize` with the same text, voice and frames (its first_audio_s and RTF). Memory:
the tab's `performance.measureUserAgentSpecificMemory()` (wasm heap included) after the runs,
and the torch process's RSS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import psutil  # noqa: E402
import torch  # noqa: E402

from bench.lib.machine import machine_info  # noqa: E402
from bench.lib.record import new_record, write_record  # noqa: E402

DATA = Path(os.environ.get("MOSS_TTS_PARITY_DIR", ROOT.parent / "shared" / "moss_tts_nano_data"))
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."
VOICE = "Cedar"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--autoplay-policy=no-user-gesture-required"]

RUN_JS = """async ({text, voice, frames}) => {
  const t0 = performance.now(); let first = null, samples = 0;
  for await (const item of mossTTS.stream({text, voice, greedy: true, maxFrames: frames, normalizeText: false})) {
    if (first === null && item.pcm.length) first = performance.now() - t0;
    samples += item.pcm.length / 2;
  }
  return {ttfp_ms: first, elapsed_ms: performance.now() - t0, audio_s: samples / 48000};
}"""
MEMORY_JS = """async () => {
  if (!performance.measureUserAgentSpecificMemory) return null;
  const m = await Promise.race([performance.measureUserAgentSpecificMemory(), new Promise((r) => setTimeout(r, 20000))]);
  return m ? m.bytes : null;
}"""


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def _one_voice_dir(scratch: Path) -> Path:
    from tts_core.voices.catalog import load_catalog

    clip = load_catalog().get(VOICE).clip.file
    voices = scratch / "voices"
    voices.mkdir()
    (voices / clip).symlink_to(DATA / "presets" / clip)
    return voices


def build(args, precision: str, scratch: Path, lm, codec) -> Path:
    from tts_core.export.onnx_export import ExportOptions
    from tts_core.export.web import export_web

    out = scratch / f"site-{precision}"
    export_web(out, lm, codec, codec_dir=Path(args.codec), tokenizer=Path(args.lm) / "tokenizer.model",
               voices_dir=_one_voice_dir(scratch) if not (scratch / "voices").exists() else scratch / "voices",
               options=ExportOptions(precision=precision, max_rows=1024))
    return out


def measure_browser(site: Path, args) -> dict:
    import json

    from playwright.sync_api import sync_playwright
    from support.browser_engine_helpers import serve_static

    manifest = json.loads((site / "manifest.json").read_text())
    download = sum(f["size"] for f in manifest["files"])
    with serve_static(site) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            started = time.perf_counter()
            page.goto(f"{url}index.html?backend=wasm&threads={args.threads}")
            page.wait_for_function("window.mossTTS !== undefined")
            page.evaluate("mossTTS.ready")
            load_s = time.perf_counter() - started
            info = page.evaluate("mossTTS.info()")
            options = {"text": TEXT, "voice": VOICE, "frames": args.frames}
            page.evaluate(RUN_JS, options)  # warm-up
            runs = [page.evaluate(RUN_JS, options) for _ in range(args.repeats)]
            memory = page.evaluate(MEMORY_JS)
        finally:
            browser.close()
    return {"engine": f"browser wasm {info['precision']}", "threads": info["threads"], "download_mb": download / 1e6,
            "load_s": load_s, "ttfp_ms": _spread([r["ttfp_ms"] for r in runs]),
            "rtf": _spread([r["elapsed_ms"] / 1000 / r["audio_s"] for r in runs]),
            "audio_s": runs[0]["audio_s"], "memory_mb": memory / 1e6 if memory else None}


def measure_torch(args, scratch: Path) -> dict:
    from tts_core.config import EngineConfig, SamplingParams
    from tts_core.synthesizer import Synthesizer
    from tts_core.types import SynthesisRequest

    synth = Synthesizer.from_pretrained(args.lm, args.codec, device="cpu", voices_dir=_one_voice_dir_or(scratch),
                                        cache_dir=scratch / "torch-cache", allow_download=False,
                                        engine_config=EngineConfig(max_active_streams=1))
    try:
        request = SynthesisRequest(text=TEXT, voice=VOICE, sampling=SamplingParams.greedy(), seed=0,
                                   max_frames=args.frames, normalize_text=False)
        synth.synthesize(request)  # warm-up
        results = [synth.synthesize(request) for _ in range(args.repeats)]
        rss = psutil.Process().memory_info().rss
    finally:
        synth.close()
    return {"engine": "torch CPU (server engine)", "threads": torch.get_num_threads(), "download_mb": None,
            "load_s": None, "ttfp_ms": _spread([r.timings.first_audio_s * 1000 for r in results]),
            "rtf": _spread([r.timings.rtf for r in results]), "audio_s": results[0].timings.audio_s,
            "memory_mb": rss / 1e6}


def _one_voice_dir_or(scratch: Path) -> Path:
    return scratch / "voices" if (scratch / "voices").exists() else _one_voice_dir(scratch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", required=True, help="full-size LM checkpoint (make-random-checkpoint)")
    parser.add_argument("--codec", required=True)
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--frames", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="wasm threads in the page")
    parser.add_argument("--json", help="write the record here")
    parser.add_argument("--note", action="append")
    args = parser.parse_args(argv)

    from tts_core.model.codec_loading import load_codec
    from tts_core.model.lm_loading import load_lm

    record = new_record("browser_engine", args, machine_info([torch.device("cpu")]),
                        {"frames": args.frames, "text_chars": len(TEXT), "voice": VOICE, "backend": "wasm",
                         "browser": "headless Chromium (Debian)"}, program="python bench/browser_engine.py")
    rows = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        lm, codec = load_lm(args.lm), load_codec(args.codec)
        sites = {p: build(args, p, scratch, lm, codec) for p in args.precisions.split(",")}
        del lm, codec
        rows.append(measure_torch(args, scratch))
        for site in sites.values():
            rows.append(measure_browser(site, args))
            print(rows[-1], flush=True)
    record["rows"] = rows
    for row in rows:
        print(f"{row['engine']}: TTFP {row['ttfp_ms']['median']:.0f} ms, RTF {row['rtf']['median']:.2f}, "
              f"download {row['download_mb'] or 0:.0f} MB, memory {row['memory_mb'] or 0:.0f} MB")
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
