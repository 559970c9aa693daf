"""`python -m tts_core export-web OUT --lm DIR --codec DIR [--tokenizer F] [--voices-dir D]`.

A static site that runs the whole studio in the visitor's browser: the page and the engine
(`static/engine/`, with the player modules it shares with the server's page), onnxruntime-web's
dist files (copied from `node_modules/`, installed by `npm ci`), the exported graphs at each
precision asked for (`onnx_export`), the tokenizer and the preset voices' codes as JSON,
`selftest.json` (what a backend must reproduce before the page trusts it: a prefill's hidden
state and a few frames of audio, from the torch modules), `manifest.json` (every model file with
its size and SHA-256: the page fetches only what it needs and caches by hash) and a README.md
whose front matter makes the folder a static Hugging Face Space with the cross-origin isolation
headers that wasm threads need (`python -m tts_core serve-web` serves it the same way locally).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .onnx_export import ExportOptions

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
STATIC = REPO_ROOT / "static"
# The page's modules: the engine, and the studio's own player pieces it plays through (paths in
# static/, kept in the build so the page's relative imports resolve as on the server).
PLAYER_FILES = ("player/stream-player.js", "player/audio.js", "player/worklet.js", "player/buffering.js",
                "player/gainglide.js", "player/stats.js", "player/source.js", "player/framing.js",
                "player/transport.js", "player/opus.js", "player/ogg.js", "studio/wav.js", "studio/player.css")
ENGINE_FILES = ("engine.js", "codec_stream.js", "codec_worker.js", "sentencepiece.js", "prompt.js", "sampling.js",
                "chunking.js", "normalize.js", "numbers.js", "loader.js", "page.js")
# onnxruntime-web builds the page may load: plain wasm (SIMD + threads) and the WebGPU (JSEP) one.
ORT_FILES = ("ort.wasm.min.mjs", "ort.webgpu.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm",
             "ort-wasm-simd-threaded.jsep.mjs", "ort-wasm-simd-threaded.jsep.wasm")
CROSS_ORIGIN_HEADERS = {
    "cross-origin-embedder-policy": "require-corp",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "cross-origin",
}


def ort_dist(node_modules: Path | None = None) -> Path:
    dist = (node_modules or REPO_ROOT / "node_modules") / "onnxruntime-web" / "dist"
    missing = [name for name in ORT_FILES if not (dist / name).is_file()]
    if missing:
        raise FileNotFoundError(f"onnxruntime-web files missing in {dist} ({', '.join(missing)}): run `npm ci` in "
                                f"{REPO_ROOT}")
    return dist


def tokenizer_json(path: Path) -> dict:
    """What static/engine/sentencepiece.js needs of a SentencePiece model file."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(Path(path).read_bytes())
    if model.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.BPE:
        raise ValueError(f"{path}: the browser tokenizer implements BPE models only")
    spec = model.normalizer_spec
    return {
        "pieces": [[p.piece, p.score, int(p.type)] for p in model.pieces],
        "charsmap": base64.b64encode(spec.precompiled_charsmap).decode("ascii"),
        "add_dummy_prefix": spec.add_dummy_prefix, "remove_extra_whitespaces": spec.remove_extra_whitespaces,
        "escape_whitespaces": spec.escape_whitespaces, "unk_id": model.trainer_spec.unk_id,
        "byte_fallback": model.trainer_spec.byte_fallback,
    }


def voices_json(codec, codec_dir: Path, voices_dir: Path | None, max_text_tokens: int) -> dict:
    """Every preset whose clip is in `voices_dir`, encoded by `codec` (the codes the server would use)."""
    import torch

    from ..loader import checkpoint_fingerprint, reference_encoder
    from ..types import Voice
    from ..voices.bank import VoiceBank
    from ..voices.catalog import load_catalog

    catalog = load_catalog()
    presets = []
    with tempfile.TemporaryDirectory() as cache:
        bank = VoiceBank(catalog, voices_dir=voices_dir, cache_dir=Path(cache),
                         encoder=reference_encoder(codec, torch.device("cpu")),
                         codec_fingerprint=checkpoint_fingerprint(codec_dir), allow_download=False)
        for info in bank.list_presets():
            if not info.available:
                continue
            resolved = bank.resolve(Voice.preset(info.name))
            presets.append({"name": info.name, "language": info.language, "description": info.description,
                            "transcript": resolved.transcript, "frames": int(resolved.codes.shape[0]),
                            "codes": resolved.codes.reshape(-1).tolist()})
    if not presets:
        raise ValueError(f"no preset clip found in {voices_dir}: pass --voices-dir with the catalog's clips")
    names = [p["name"] for p in presets]
    default = catalog.default if catalog.default in names else names[0]
    return {"default": default, "presets": presets, "max_text_tokens": max_text_tokens}


def front_matter(title: str) -> str:
    headers = "".join(f"  {key}: {value}\n" for key, value in CROSS_ORIGIN_HEADERS.items())
    return (f"---\ntitle: {title}\nemoji: 🗣️\ncolorFrom: blue\ncolorTo: green\nsdk: static\napp_file: index.html\n"
            f"pinned: false\ncustom_headers:\n{headers}---\n\n"
            "MOSS-TTS-Nano running entirely in the visitor's browser (onnxruntime-web: WebGPU where present, "
            "else wasm with SIMD and threads). Built by `python -m tts_core export-web`.\n")


SELFTEST_FRAMES = 3
SELFTEST_MIN_SNR_DB = 20.0  # codec audio against the torch decoder's (fp16 lands far above; broken math far below)
SELFTEST_MIN_COSINE = 0.98  # the prefill's hidden state against torch's


def selftest_json(lm, codec, voices: dict) -> dict:
    """The reference a backend is checked against at start: a prefill of rows made from the default
    voice's first frames (its hidden state, by the torch LM) and the audio of those frames (the
    torch codec, streaming), as float32 base64."""
    import numpy as np
    import torch

    c = lm.config
    preset = next(p for p in voices["presets"] if p["name"] == voices["default"])
    frames = min(SELFTEST_FRAMES, preset["frames"])
    codes = np.asarray(preset["codes"][: frames * c.n_vq], dtype=np.int64).reshape(frames, c.n_vq)
    rows = np.full((frames + 1, c.row_width), c.audio_pad_id, dtype=np.int64)
    rows[0, 0] = c.audio_start_id
    rows[1:, 0] = c.audio_assistant_slot_id
    rows[1:, 1:] = codes
    with torch.no_grad():
        lm_cpu = lm.float().cpu().eval()
        hidden = lm_cpu.prefill(torch.as_tensor(rows), lm_cpu.new_cache(1, len(rows)), 0).float().numpy()
        state = codec.new_decode_state(1, "cpu")
        pcm = codec.decode_step(torch.as_tensor(codes.T[None]), state)[0].float().numpy()  # [2, S]

    def b64(array):
        return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")

    return {"rows": rows.reshape(-1).tolist(), "codes": codes.reshape(-1).tolist(), "frames": frames,
            "hidden": b64(hidden), "pcm": b64(pcm), "min_snr_db": SELFTEST_MIN_SNR_DB,
            "min_cosine": SELFTEST_MIN_COSINE}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def export_web(out_dir: Path, lm, codec, *, codec_dir: Path, tokenizer: Path, voices_dir: Path | None,
               options: ExportOptions | None = None, max_text_tokens: int = 75,
               title: str = "MOSS-TTS-Nano in the browser") -> dict:
    """Write the static site into `out_dir` (created; must be empty or absent). Returns the manifest."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty: give a new folder for the build")
    dist = ort_dist()
    models = out_dir / "models"
    # torch only when exporting: the server imports this module for CROSS_ORIGIN_HEADERS
    from .onnx_export import ExportOptions, export_onnx

    export_onnx(models, lm, codec, options or ExportOptions())
    (models / "tokenizer.json").write_text(json.dumps(tokenizer_json(tokenizer)), encoding="utf-8")
    voices = voices_json(codec, codec_dir, voices_dir, max_text_tokens)
    (models / "voices.json").write_text(json.dumps(voices), encoding="utf-8")
    (models / "selftest.json").write_text(json.dumps(selftest_json(lm, codec, voices)), encoding="utf-8")
    engine = out_dir / "engine"
    (engine / "ort").mkdir(parents=True)
    for name in ENGINE_FILES:
        shutil.copy2(STATIC / "engine" / name, engine / name)
    for name in ORT_FILES:
        shutil.copy2(dist / name, engine / "ort" / name)
    for name in PLAYER_FILES:
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(STATIC / name, out_dir / name)
    shutil.copy2(STATIC / "engine" / "index.html", out_dir / "index.html")
    files = sorted(p for p in models.iterdir() if p.is_file())
    manifest = {
        "format": 2, "models_dir": "models", "graphs": "models/graphs.json", "tokenizer": "models/tokenizer.json",
        "voices": "models/voices.json", "selftest": "models/selftest.json",
        "files": [{"path": f"models/{p.name}", "size": p.stat().st_size, "sha256": _sha256(p)} for p in files],
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    (out_dir / "README.md").write_text(front_matter(title), encoding="utf-8")
    sizes = {f["path"]: f["size"] for f in manifest["files"]}
    for precision, graphs in json.loads((models / "graphs.json").read_text())["precisions"].items():
        speak = sum(sizes[f"models/{graphs[kind]}"] for kind in ("global", "local", "codec"))
        logger.info("%s: speaking downloads %.1f MB, cloning %.1f MB more", precision, speak / 1e6,
                    sizes[f"models/{graphs['encoder']}"] / 1e6)
    logger.info("static build in %s", out_dir)
    return manifest
