"""Drive the exported graphs with ONNX Runtime in Python: the reference the browser engine is held to.

The frame loop is the torch engine's (`lm_step.frame` then `lm_step.global_step`), run graph by
graph: position 0 gives the stop pair, positions 1..16 each a codebook's logits; the pick happens
here, between the calls (greedy with the repetition penalty of `sampling.apply_repetition_penalty`,
computed in float32 as torch does). The JS engine runs the very same loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


def _session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@dataclass
class OnnxModels:
    """The three sessions of one export directory and its `graphs.json`."""

    description: dict
    global_graph: object
    local_graph: object
    codec_graph: object
    encoder_graph: object

    @classmethod
    def load(cls, directory: Path, threads: int = 1) -> OnnxModels:
        directory = Path(directory)
        description = json.loads((directory / "graphs.json").read_text(encoding="utf-8"))
        graphs = description["graphs"]
        return cls(description, *(_session(directory / graphs[k], threads) for k in ("global", "local", "codec", "encoder")))

    @property
    def lm(self) -> dict:
        return self.description["lm"]


def penalised(logits: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """`sampling.apply_repetition_penalty` for one row, float32 like torch."""
    if penalty == 1.0:
        return logits
    rp = np.float32(penalty)
    return np.where(seen, np.where(logits < 0, logits * rp, logits / rp), logits).astype(np.float32)


@dataclass
class GreedyRun:
    """Greedy generation of one prompt through the graphs."""

    models: OnnxModels
    penalty: float = 1.0
    seen: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        lm = self.models.lm
        self.seen = np.zeros((lm["n_vq"], max(lm["codebook_sizes"])), dtype=bool)

    def global_pass(self, rows: np.ndarray, past_k: np.ndarray, past_v: np.ndarray):
        return self.models.global_graph.run(None, {"rows": rows[None].astype(np.int64), "past_k": past_k,
                                                   "past_v": past_v})

    def frame(self, hidden: np.ndarray) -> tuple[bool, np.ndarray]:
        """Continue/stop and the 16 codes of one frame from the global state hidden [1, H]."""
        lm = self.models.lm
        kv_shape = (lm["local_num_layers"], 1, lm["num_heads"], lm["local_positions"], lm["head_dim"])
        keys = values = np.zeros(kv_shape, np.float32)
        prev = np.zeros(1, np.int64)
        codes = np.zeros(lm["n_vq"], np.int64)
        go_on = True
        for position in range(lm["n_vq"] + 1):
            stop, audio, keys, values = self.models.local_graph.run(None, {
                "hidden": hidden, "prev_code": prev, "position": np.array([position], np.int64),
                "keys": keys, "values": values})
            if position == 0:
                go_on = bool(stop[0, 0] >= stop[0, 1])  # greedy: ties continue (argmax takes index 0)
                continue
            k = position - 1
            row = penalised(audio[0], self.seen[k, : audio.shape[1]], self.penalty)
            codes[k] = int(np.argmax(row))
            prev = codes[k : k + 1].copy()
        return go_on, codes

    def generate(self, rows: np.ndarray, max_frames: int) -> np.ndarray:
        """Codes [F, n_vq] of prompt rows [T, n_vq + 1] (F < max_frames when the model stopped)."""
        lm = self.models.lm
        empty = np.zeros((lm["num_layers"], 1, lm["num_heads"], 0, lm["head_dim"]), np.float32)
        hidden, past_k, past_v = self.global_pass(np.asarray(rows), empty, empty)
        frames = []
        for _ in range(max_frames):
            go_on, codes = self.frame(hidden)
            if not go_on:
                break
            frames.append(codes)
            self.seen[np.arange(lm["n_vq"]), codes] = True
            row = np.concatenate([[lm["audio_assistant_slot_id"]], codes])[None]
            hidden, past_k, past_v = self.global_pass(row, past_k, past_v)
        return np.array(frames, dtype=np.int64).reshape(-1, lm["n_vq"])


class CodecStream:
    """The streaming codec decoder through `codec_decode.onnx`: codes in, audio out, state kept here."""

    def __init__(self, models: OnnxModels):
        self.models = models
        self.specs = models.description["codec"]["state"]
        self.state = {s["name"]: np.full(s["shape"], s["fill"], dtype=s["dtype"]) for s in self.specs}

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """codes [frames_per_pass, n_q] -> audio [2, samples] float32."""
        feeds = {"codes": np.ascontiguousarray(np.asarray(codes, np.int64).T[None]), **self.state}
        audio, *state = self.models.codec_graph.run(None, feeds)
        self.state = {s["name"]: value for s, value in zip(self.specs, state)}
        return audio[0]


def encode_clip(models: OnnxModels, wav: np.ndarray) -> np.ndarray:
    """A reference clip [2, n] float32 at 48 kHz (n <= the graph's clip length) -> codes [F, 16]."""
    samples = models.description["codec"]["clip_samples"]
    if wav.shape[-1] > samples:
        raise ValueError(f"clip of {wav.shape[-1]} samples exceeds the encoder's {samples}: trim it first")
    padded = np.zeros((1, 2, samples), np.float32)
    padded[0, :, : wav.shape[-1]] = wav
    codes, frames = models.encoder_graph.run(None, {"wav": padded, "length": np.array([wav.shape[-1]], np.int64)})
    return codes[0, :, : int(frames[0])].T.astype(np.int64)
