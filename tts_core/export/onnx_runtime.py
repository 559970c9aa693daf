"""Drive the exported graphs with ONNX Runtime in Python: the reference the browser engine is held to.

The frame loop is the torch engine's (`lm_step.frame` then `lm_step.global_step`), one graph call
each: the frame graph decides and draws the whole frame from the uniforms, seen mask and sampling
parameters it is given, the global graph appends the frame's row to a cache of fixed capacity.
The codec's ring state is kept here and only the slots a pass wrote come back. The JS engine runs
the very same loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import SamplingParams


def _session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@dataclass
class OnnxModels:
    """The sessions of one export directory and its `graphs.json`; the clip encoder is opened
    when first used (speaking never needs it)."""

    description: dict
    global_graph: object
    local_graph: object
    codec_graph: object
    directory: Path
    threads: int = 1
    _encoder: object = None

    @classmethod
    def load(cls, directory: Path, threads: int = 1, precision: str | None = None) -> OnnxModels:
        directory = Path(directory)
        description = json.loads((directory / "graphs.json").read_text(encoding="utf-8"))
        files = graph_files(description, precision)
        return cls(description, *(_session(directory / files[k], threads) for k in ("global", "local", "codec")),
                   directory, threads)

    @property
    def encoder_graph(self):
        if self._encoder is None:
            self._encoder = _session(self.directory / graph_files(self.description)["encoder"], self.threads)
        return self._encoder

    @property
    def lm(self) -> dict:
        return self.description["lm"]


def graph_files(description: dict, precision: str | None = None) -> dict[str, str]:
    """The graph files of one precision of an export ({kind: file}); default: its first."""
    sets = description["precisions"]
    precision = precision or next(iter(sets))
    if precision not in sets:
        raise ValueError(f"precision {precision!r} is not in this export; it has {', '.join(sets)}")
    return sets[precision]


class GlobalCache:
    """The global transformer's cache as `lm_global.onnx` takes it: `capacity` rows fixed up front,
    keys transposed [L, 1, nh, D, C], values [L, 1, nh, C, D], the first `length` rows valid."""

    def __init__(self, lm: dict, capacity: int):
        shape = (lm["num_layers"], 1, lm["num_heads"])
        self.keys = np.zeros((*shape, lm["head_dim"], capacity), np.float32)
        self.values = np.zeros((*shape, capacity, lm["head_dim"]), np.float32)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.values.shape[3]

    def feeds(self) -> dict[str, np.ndarray]:
        layers = self.keys.shape[0]
        return {**{f"keys_{i}": self.keys[i] for i in range(layers)},
                **{f"values_{i}": self.values[i] for i in range(layers)}}

    def append(self, new_keys: np.ndarray, new_values: np.ndarray) -> None:
        """new_keys/new_values [L, nh, T, D] -> rows length..length + T - 1."""
        rows = new_keys.shape[2]
        if self.length + rows > self.capacity:
            raise ValueError(f"{self.length} + {rows} rows exceed the cache's capacity {self.capacity}")
        self.keys[:, 0, :, :, self.length : self.length + rows] = new_keys.transpose(0, 1, 3, 2)
        self.values[:, 0, :, self.length : self.length + rows] = new_values
        self.length += rows


@dataclass
class Generation:
    """Frame generation of one prompt through the graphs, drawing each frame's uniforms from a
    `StreamSampler` (the torch engine's per-stream generator, so a seed gives the torch engine's
    codes) and feeding the sampler's parameters and seen mask to the frame graph."""

    models: OnnxModels
    params: SamplingParams = field(default_factory=SamplingParams.greedy)
    seed: int = 0

    def global_pass(self, rows: np.ndarray, cache: GlobalCache) -> np.ndarray:
        hidden, new_keys, new_values = self.models.global_graph.run(None, {
            "rows": np.asarray(rows, np.int64)[None], "length": np.array([cache.length], np.int64), **cache.feeds()})
        cache.append(new_keys, new_values)
        return hidden

    def generate(self, rows: np.ndarray, max_frames: int) -> np.ndarray:
        """Codes [F, n_vq] of prompt rows [T, n_vq + 1] (F < max_frames when the model stopped)."""
        from ..engine.sampler import StreamSampler, param_row

        lm = self.models.lm
        vocab = max(lm["codebook_sizes"])
        sampler = StreamSampler(self.params, self.seed, lm["n_vq"], vocab)
        table = np.array([param_row(self.params, vocab)], np.float32)
        cache = GlobalCache(lm, len(rows) + max_frames)
        hidden = self.global_pass(rows, cache)
        frames = []
        for _ in range(max_frames):
            go_on, codes = self.models.local_graph.run(None, {
                "hidden": hidden, "seen": sampler.seen.numpy()[None], "uniforms": sampler.draw_uniforms()[None],
                "sampling_params": table})
            if not go_on[0]:
                break
            frames.append(codes[0])
            sampler.observe(codes[0])
            hidden = self.global_pass(np.concatenate([[lm["audio_assistant_slot_id"]], codes[0]])[None], cache)
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
        names = [o.name for o in self.models.codec_graph.get_outputs()]
        out = dict(zip(names, self.models.codec_graph.run(None, feeds)))
        for spec in self.specs:
            name = spec["name"]
            if spec["ring"]:  # write the pass's new entries into the ring at the slots it names
                self.state[name][:, :, out[spec["ring"]]] = out[f"{name}_new"]
            else:
                self.state[name] = out[f"{name}_out"]
        return out["audio"][0]


def encode_clip(models: OnnxModels, wav: np.ndarray) -> np.ndarray:
    """A reference clip [2, n] float32 at 48 kHz (n <= the graph's clip length) -> codes [F, 16]."""
    samples = models.description["codec"]["clip_samples"]
    if wav.shape[-1] > samples:
        raise ValueError(f"clip of {wav.shape[-1]} samples exceeds the encoder's {samples}: trim it first")
    padded = np.zeros((1, 2, samples), np.float32)
    padded[0, :, : wav.shape[-1]] = wav
    codes, frames = models.encoder_graph.run(None, {"wav": padded, "length": np.array([wav.shape[-1]], np.int64)})
    return codes[0, :, : int(frames[0])].T.astype(np.int64)
