"""Speed, download and fidelity of the in-browser engine (headless Chromium, onnxruntime-web wasm)
per precision, side by side in one run with the torch CPU engine on the same machine, full-size
weights.

    python -m tts_core make-random-checkpoint /tmp/full        # full-size random weights (no download)
    python -m bench.browser_engine --lm /tmp/full/lm --codec /tmp/full/codec \\
        --json bench/results/browser-engine-cpu.json

One `export-web` build of the checkpoints (fp32, int8 and fp16; one preset voice, to keep the
build short; `--build DIR` keeps it for the next run), served as `serve-web` serves it. Per wasm
precision, in a fresh browser context: the first visit (the speaking download and the time to a
ready engine), one warm-up request and `--repeats` measured ones of `--frames` frames, greedy
(TTFP = stream() called -> first audio item, RTF = elapsed / audio seconds, and where each
frame's time went by graph), a second visit (load from the Cache API), then one long request of
`--long-frames` frames whose RTF is set against the RTF of its own first `--frames` frames. The
torch row is `Synthesizer.synthesize` with the same text, voice and frames.

Fidelity of each precision against fp32 (ONNX Runtime in Python, same graphs): greedy code
agreement teacher-forced on the fp32 codes (each frame drawn from the same history), and the codec
audio's SNR over those frames. Random weights give flat logits, so their agreement is a pessimistic
proxy for a trained model's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import torch

from bench.lib.machine import machine_info
from bench.lib.record import new_record, write_record

ROOT = Path(__file__).resolve().parent.parent

DATA = Path(os.environ.get("MOSS_TTS_PARITY_DIR", ROOT.parent / "shared" / "moss_tts_nano_data"))
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."
VOICE = "Cedar"
PRECISIONS = ("fp32", "int8", "fp16")
TIMED = ("int8", "fp32")  # what wasm runs (fp16 is for WebGPU, which headless Chromium here lacks)
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--autoplay-policy=no-user-gesture-required"]

RUN_JS = """async ({text, voice, frames}) => {
  const s0 = mossTTS.stats(); const t0 = performance.now(); const at = []; let samples = 0;
  for await (const item of mossTTS.stream({text, voice, greedy: true, maxFrames: frames, normalizeText: false})) {
    if (item.pcm.length && !item.isPause) at.push(performance.now() - t0);
    samples += item.pcm.length / 2;
  }
  const s1 = mossTTS.stats();
  return {elapsed_ms: performance.now() - t0, at, audio_s: samples / 48000,
          graphs_ms: {global: s1.global - s0.global, local: s1.local - s0.local, codec: s1.codec - s0.codec}};
}"""


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def _one_voice_dir(scratch: Path) -> Path:
    from tts_core.voices.catalog import load_catalog

    voices = scratch / "voices"
    if not voices.exists():
        clip = load_catalog().get(VOICE).clip.file
        voices.mkdir(parents=True)
        (voices / clip).symlink_to(DATA / "presets" / clip)
    return voices


def build(args, site: Path, scratch: Path) -> Path:
    from tts_core.export.onnx_export import ExportOptions
    from tts_core.export.web import export_web
    from tts_core.model.codec_loading import load_codec
    from tts_core.model.lm_loading import load_lm

    if (site / "manifest.json").is_file():
        return site
    export_web(site, load_lm(args.lm), load_codec(args.codec), codec_dir=Path(args.codec),
               tokenizer=Path(args.lm) / "tokenizer.model", voices_dir=_one_voice_dir(scratch),
               options=ExportOptions(precisions=PRECISIONS, max_rows=1024))
    return site


def fidelity(site: Path, frames: int) -> dict:
    """Per precision against fp32: teacher-forced greedy agreement and the codec's SNR."""
    from tts_core.config import SamplingParams
    from tts_core.engine.sampler import param_row
    from tts_core.export.onnx_runtime import CodecStream, Generation, GlobalCache, OnnxModels

    models = {p: OnnxModels.load(site / "models", threads=2, precision=p) for p in PRECISIONS}
    lm = models["fp32"].lm
    voices = json.loads((site / "models" / "voices.json").read_text())
    preset = next(p for p in voices["presets"] if p["name"] == VOICE)
    reference = np.asarray(preset["codes"], np.int64).reshape(-1, lm["n_vq"])
    rows = np.full((len(reference) + 2, lm["n_vq"] + 1), lm["audio_pad_id"], np.int64)
    rows[0, 0], rows[-1, 0] = lm["im_start_id"], lm["audio_start_id"]
    rows[1:-1, 0], rows[1:-1, 1:] = lm["audio_user_slot_id"], reference
    codes = Generation(models["fp32"]).generate(rows, frames)
    vocab = max(lm["codebook_sizes"])
    table = np.array([param_row(SamplingParams.greedy(), vocab)], np.float32)
    feeds = {"seen": np.zeros((1, lm["n_vq"], vocab), bool), "uniforms": np.full((1, lm["n_vq"] + 1), 0.5, np.float32),
             "sampling_params": table}

    def forced(m) -> np.ndarray:
        run, cache = Generation(m), GlobalCache(lm, len(rows) + len(codes))
        hidden, picks = run.global_pass(rows, cache), []
        for row in codes:
            _, pick = m.local_graph.run(None, {"hidden": hidden, **feeds})
            picks.append(pick[0])
            hidden = run.global_pass(np.concatenate([[lm["audio_assistant_slot_id"]], row])[None], cache)
        return np.array(picks)

    def audio(m) -> np.ndarray:
        stream = CodecStream(m)
        return np.concatenate([stream.decode(row[None]) for row in codes], axis=1)

    base_picks, base_audio = forced(models["fp32"]), audio(models["fp32"])
    out = {}
    for precision in PRECISIONS[1:]:
        picks, pcm = forced(models[precision]), audio(models[precision])
        noise = float(((pcm - base_audio) ** 2).sum())
        out[precision] = {"greedy_agreement": float((picks == base_picks).mean()),
                          "first_codebook_agreement": float((picks[:, 0] == base_picks[:, 0]).mean()),
                          "codec_snr_db": None if noise == 0 else 10 * float(np.log10((base_audio ** 2).sum() / noise)),
                          "frames": len(codes)}
    return out


def _visit(context, url: str) -> tuple[float, dict]:
    page = context.pages[0] if context.pages else context.new_page()
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_function("window.mossTTS !== undefined")
    page.evaluate("mossTTS.ready")
    return time.perf_counter() - started, page.evaluate("mossTTS.info()")


def measure_browser(browser, url: str, precision: str, args) -> dict:
    manifest = json.loads(args.site_manifest)
    context = browser.new_context()
    try:
        address = f"{url}index.html?backend=wasm&precision={precision}&threads={args.threads}"
        load_s, info = _visit(context, address)
        page = context.pages[0]
        options = {"text": TEXT, "voice": VOICE, "frames": args.frames}
        page.evaluate(RUN_JS, options)  # warm-up
        runs = [page.evaluate(RUN_JS, options) for _ in range(args.repeats)]
        cached_s, cached_info = _visit(context, address)
        long_run = page.evaluate(RUN_JS, {**options, "frames": args.long_frames})
    finally:
        context.close()
    common = sum(f["size"] for f in manifest["files"] if f["path"] in
                 (manifest["graphs"], manifest["tokenizer"], manifest["voices"], manifest["selftest"]))
    at = long_run["at"]
    head = min(args.frames, len(at))
    rtf_head = at[head - 1] / 1000 / (head * 0.08)
    rtf_long = long_run["elapsed_ms"] / 1000 / long_run["audio_s"]
    return {"engine": f"browser wasm {info['precision']}", "threads": info["threads"],
            "download_mb": (info["downloadBytes"] + common) / 1e6, "load_s": load_s,
            "load_cached_s": cached_s, "cache_hit": cached_info["fromCache"],
            "ttfp_ms": _spread([r["at"][0] for r in runs]),
            "rtf": _spread([r["elapsed_ms"] / 1000 / r["audio_s"] for r in runs]),
            "graphs_ms_per_frame": {k: statistics.median(r["graphs_ms"][k] / len(r["at"]) for r in runs)
                                    for k in ("global", "local", "codec")},
            "audio_s": runs[0]["audio_s"],
            "long": {"frames": len(at), "rtf": rtf_long, "rtf_first": rtf_head, "first_frames": head,
                     "ratio": rtf_long / rtf_head}}


def measure_torch(args, scratch: Path) -> dict:
    from tts_core.config import EngineConfig, SamplingParams
    from tts_core.synthesizer import Synthesizer
    from tts_core.types import SynthesisRequest

    synth = Synthesizer.from_pretrained(args.lm, args.codec, device="cpu", voices_dir=_one_voice_dir(scratch),
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
            "load_s": None, "load_cached_s": None, "ttfp_ms": _spread([r.timings.first_audio_s * 1000 for r in results]),
            "rtf": _spread([r.timings.rtf for r in results]), "audio_s": results[0].timings.audio_s,
            "memory_mb": rss / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", required=True, help="full-size LM checkpoint (make-random-checkpoint)")
    parser.add_argument("--codec", required=True)
    parser.add_argument("--build", help="keep the export-web build here (reused when it exists)")
    parser.add_argument("--frames", type=int, default=25)
    parser.add_argument("--long-frames", type=int, default=375, help="the long request (375 frames = 30 s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fidelity-frames", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2, help="wasm threads in the page")
    parser.add_argument("--json", help="write the record here")
    parser.add_argument("--note", action="append")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from tts_core.export.serve import serve_static

    record = new_record("browser_engine", args, machine_info([torch.device("cpu")]),
                        {"frames": args.frames, "long_frames": args.long_frames, "text_chars": len(TEXT),
                         "voice": VOICE, "backend": "wasm", "browser": "headless Chromium (Debian)"},
                        program="python -m bench.browser_engine")
    record["args"].pop("build", None)  # a local path, like --lm/--codec
    if args.build:
        record["command"] = record["command"].replace(f" --build {args.build}", "")
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        site = build(args, Path(args.build) if args.build else scratch / "site", scratch)
        args.site_manifest = (site / "manifest.json").read_text()
        record["fidelity"] = fidelity(site, args.fidelity_frames)
        print("fidelity vs fp32:", record["fidelity"], flush=True)
        record["load_average_1m_measured"] = round(os.getloadavg()[0], 2)
        rows = [measure_torch(args, scratch)]
        with serve_static(site) as url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                                 args=CHROMIUM_FLAGS)
            try:
                for precision in TIMED:
                    rows.append(measure_browser(browser, url, precision, args))
                    print(rows[-1], flush=True)
            finally:
                browser.close()
    record["rows"] = rows
    record["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    for row in rows:
        print(f"{row['engine']}: TTFP {row['ttfp_ms']['median']:.0f} ms, RTF {row['rtf']['median']:.2f}, "
              f"download {row['download_mb'] or 0:.0f} MB, load {row['load_s'] or 0:.1f} s, "
              f"from cache {row['load_cached_s'] or 0:.1f} s"
              + (f", long RTF {row['long']['rtf']:.2f} vs first {row['long']['rtf_first']:.2f}" if "long" in row else ""))
    print(f"load average at start {record['load_average_1m']}, end {record['load_average_1m_end']}")
    if args.json:
        write_record(record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
