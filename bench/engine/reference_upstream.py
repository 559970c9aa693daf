"""Drive the unmodified upstream MOSS-TTS-Nano code (for bench/engine/reference.py; see its docstring).

Nothing here edits a reference file. The harness acts from the outside only:
- the two remote-code folders are imported as packages under private names (as HF's dynamic-module
  loader would), the LM one with a stand-in `torchaudio` (see `_import_lm_package`);
- the runtime's two hub loaders (`AutoModelForCausalLM` / `AutoModel`, names in the runtime module)
  are replaced by objects that hand back the models built here from the real configs, so the
  runtime's own post-load steps (device, dtype, attention choice, CUDA decode-budget policy, codec
  attention + compute dtype) all run;
- on the LM instance, `build_inference_input_ids` returns our prompt rows and
  `_sample_next_assistant_text_token` still samples but always answers "continue", so every run
  makes exactly the requested number of frames.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

LM_MARKER = "modeling_moss_tts_nano.py"
CODEC_MARKER = "modeling_moss_audio_tokenizer.py"
RUNTIME_MARKER = "moss_tts_nano_runtime.py"
_LM_PACKAGE = "moss_reference_lm"
_CODEC_PACKAGE = "moss_reference_codec"


@dataclass(frozen=True, slots=True)
class ReferencePaths:
    """Folders of the three upstream parts inside `--reference-dir`."""

    lm: Path  # HF OpenMOSS-Team/MOSS-TTS-Nano remote code (modeling_moss_tts_nano.py + siblings)
    codec: Path  # HF OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano remote code
    runtime: Path  # GitHub OpenMOSS/MOSS-TTS-Nano checkout (moss_tts_nano_runtime.py, moss_tts_nano/)


@dataclass(frozen=True, slots=True)
class StreamFigures:
    """One stream's figures: call -> first audio, call -> last audio, audio length."""

    ttfp_s: float
    elapsed_s: float
    audio_s: float

    @property
    def rtf(self) -> float:
        return self.elapsed_s / self.audio_s


def locate(root: str | Path) -> ReferencePaths:
    """Find the folders holding the three marker files anywhere under `root` (one of each)."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"--reference-dir {str(root)!r} is not a directory; point it at the folder "
                         "holding the unmodified upstream code (or set MOSS_TTS_REFERENCE_DIR)")
    found = {}
    for marker in (LM_MARKER, CODEC_MARKER, RUNTIME_MARKER):
        hits = sorted(p.parent for p in root.rglob(marker) if ".cache" not in p.parts)
        if len(hits) != 1:
            what = "no" if not hits else f"{len(hits)} copies of"
            raise ValueError(f"--reference-dir holds {what} {marker} (need exactly one); "
                             "see bench/engine/reference.py for the expected contents")
        found[marker] = hits[0]
    return ReferencePaths(lm=found[LM_MARKER], codec=found[CODEC_MARKER], runtime=found[RUNTIME_MARKER])


def fingerprint(paths: ReferencePaths) -> dict:
    """sha256 of every reference .py file timed, so a figure can be tied to the exact code."""
    out = {}
    for folder in (paths.lm, paths.codec, paths.runtime):
        for file in sorted(folder.glob("*.py")):
            out[f"{folder.name}/{file.name}"] = hashlib.sha256(file.read_bytes()).hexdigest()[:16]
    return out


def _import_package(name: str, folder: Path) -> types.ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _import_lm_package(folder: Path) -> types.ModuleType:
    """Import the LM remote code with a stand-in `torchaudio` bound to it. The file imports
    torchaudio at module level but only reads a prompt clip with it (not done here) and saves the
    finished wav after the last audio chunk (outside the timed span); torchaudio is missing on
    torch 2.13 and, from 2.9 on, cannot save without torchcodec. The rest of the process keeps
    whatever torchaudio it had."""
    import transformers  # noqa: F401  (it probes for torchaudio at import: let it see the truth)

    stand_in = types.ModuleType("torchaudio")
    stand_in.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
    stand_in.save = lambda *args, **kwargs: None
    previous = sys.modules.get("torchaudio")
    sys.modules["torchaudio"] = stand_in
    try:
        return _import_package(_LM_PACKAGE, folder)
    finally:
        if previous is None:
            del sys.modules["torchaudio"]
        else:
            sys.modules["torchaudio"] = previous


class _Prebuilt:
    """Stands in for a hub `Auto*` class: `from_pretrained` returns the model built here."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def from_pretrained(self, *args, **kwargs) -> torch.nn.Module:
        return self.model


class ReferenceStream:
    """The upstream runtime (`NanoTTSService`) over random-weight reference models."""

    def __init__(self, paths: ReferencePaths, lm_config: Path, codec_config: Path, device: torch.device,
                 prompt: np.ndarray, seed: int, out_dir: Path):
        lm_pkg = _import_lm_package(paths.lm)
        _import_package(_CODEC_PACKAGE, paths.codec)
        codec_cfg = importlib.import_module(f"{_CODEC_PACKAGE}.configuration_moss_audio_tokenizer")
        codec_mod = importlib.import_module(f"{_CODEC_PACKAGE}.modeling_moss_audio_tokenizer")
        if str(paths.runtime) not in sys.path:
            sys.path.insert(0, str(paths.runtime))
        self.runtime_module = importlib.import_module(RUNTIME_MARKER.removesuffix(".py"))

        torch.manual_seed(seed)  # the reference classes draw their init from the global RNG
        lm = lm_pkg.MossTTSNanoForCausalLM(lm_pkg.MossTTSNanoConfig(**json.loads(lm_config.read_text())))
        codec = codec_mod.MossAudioTokenizerModel(
            codec_cfg.MossAudioTokenizerConfig(**json.loads(codec_config.read_text())))
        _feed_prompt_and_never_stop(lm, prompt)
        self.runtime_module.AutoModelForCausalLM = _Prebuilt(lm)
        self.runtime_module.AutoModel = _Prebuilt(codec)

        tokenizer = lm_config.parent / "tokenizer.model"
        if not tokenizer.is_file():
            raise ValueError(f"{tokenizer} is missing: the upstream loop loads the real SentencePiece model "
                             "from beside the LM config")
        self.out_dir = out_dir
        self.service = self.runtime_module.NanoTTSService(
            checkpoint_path=tokenizer, audio_tokenizer_path=codec_config.parent, device=str(device),
            dtype="auto", attn_implementation="auto", output_dir=out_dir)
        self.service.get_model()  # the runtime's post-load steps run here, once

    def settings(self) -> dict:
        """What the runtime chose: dtype, attention (LM + codec) and codec compute dtype."""
        info = self.service.preload(voices=[], load_model=True)
        info.pop("loaded_voices", None)
        budget = getattr(type(self.service.get_model()), "_nanotts_stream_decode_budget_patch_installed", False)
        info["cuda_decode_budget_policy"] = bool(budget)
        return info

    def run(self, frames: int, seed: int) -> StreamFigures:
        """One `synthesize_stream` call, timed from the call to its first and last audio chunk."""
        audio, sample_rate, first, last = 0, 0, None, None
        start = time.perf_counter()
        events = self.service.synthesize_stream(
            text="benchmark", mode="continuation", max_new_frames=frames, seed=seed,
            output_audio_path=self.out_dir / "reference_stream.wav")
        for event in events:
            if event["type"] != "audio":
                continue
            now = time.perf_counter()
            first = now if first is None else first
            last = now
            audio += int(event["waveform"].shape[-1])
            sample_rate = int(event["sample_rate"])
        if first is None:
            raise RuntimeError("the reference stream produced no audio")
        return StreamFigures(ttfp_s=first - start, elapsed_s=last - start, audio_s=audio / sample_rate)


def _feed_prompt_and_never_stop(lm: torch.nn.Module, prompt: np.ndarray) -> None:
    """Instance-level wrappers (the reference file stays as it is): our prompt rows instead of the
    tokenizer-built ones, and a continue/stop draw that is still computed but always continues."""
    rows = torch.as_tensor(prompt, dtype=torch.long)[None]
    keep_going = int(lm.config.audio_assistant_slot_token_id)
    sample_stop_token = lm._sample_next_assistant_text_token

    def build_inference_input_ids(*, device=None, **_ignored):
        ids = rows.to(device if device is not None else next(lm.parameters()).device)
        return ids, torch.ones(ids.shape[:2], dtype=torch.bool, device=ids.device)

    def sample_next_assistant_text_token(**kwargs):
        return torch.full_like(sample_stop_token(**kwargs), keep_going)

    lm.build_inference_input_ids = build_inference_input_ids
    lm._sample_next_assistant_text_token = sample_next_assistant_text_token
