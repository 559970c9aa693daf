"""`python -m tts_core export-onnx OUT --lm DIR --codec DIR [--precision fp32|fp16|int8]`.

Writes the three graphs of `onnx_graphs` and `graphs.json`, the description a runtime needs to drive
them (token ids, shapes, the codec's state layout). Precision is applied after export, by ONNX
Runtime's own tools: fp16 converts weights and activations (graph inputs and outputs stay fp32, for
WebGPU), int8 quantises the LM's matrix weights dynamically (the codec stays fp32: its outputs are
the audio itself, and it is the small part of a frame's work).
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..model.codec import MossAudioCodec
from ..model.lm import MossTTSNanoLM
from .onnx_graphs import (
    SAMPLING_PARAMS,
    CodecEncodeGraph,
    CodecStepGraph,
    FrameGraph,
    GlobalGraph,
    codec_output_names,
    codec_state_specs,
)

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16", "int8")
GRAPH_FILES = {"global": "lm_global.onnx", "local": "lm_local.onnx", "codec": "codec_decode.onnx",
               "encoder": "codec_encode.onnx"}
FORMAT_VERSION = 2
OPSET = 18


@dataclass(frozen=True)
class ExportOptions:
    precision: str = "fp32"
    max_rows: int = 4096  # prompt rows + frames one segment may hold (bounds the RoPE table)
    codec_frames: int = 1  # frames per codec pass (the browser decodes frame by frame)
    clip_frames: int = 250  # the encoder's fixed input: 250 frames = 20 s, the voice bank's clip cap

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.max_rows < 2 or self.codec_frames < 1 or self.clip_frames < 1:
            raise ValueError("max_rows must be >= 2, codec_frames and clip_frames >= 1")


def _export(module: torch.nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str],
            dynamic: dict | None) -> None:
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), dynamo=True, input_names=inputs, output_names=outputs,
                          dynamic_shapes=dynamic, opset_version=OPSET, optimize=True, external_data=False,
                          verbose=False)


def _convert(path: Path, precision: str, kind: str) -> None:
    """Rewrite one fp32 graph file in place at `precision`."""
    if precision == "fp32" or (precision == "int8" and kind == "codec"):
        return
    import onnx

    if precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(str(path)), keep_io_types=True, disable_shape_infer=True)
        onnx.save(model, str(path))
        return
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / path.name
        path.replace(source)
        quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])


def global_cache_names(layers: int) -> list[str]:
    """`lm_global.onnx`'s cache inputs: every layer's transposed keys, then every layer's values."""
    return [f"keys_{i}" for i in range(layers)] + [f"values_{i}" for i in range(layers)]


def lm_description(lm: MossTTSNanoLM, max_rows: int) -> dict:
    c = lm.config
    return {
        "hidden_size": c.hidden_size, "num_layers": c.num_layers, "num_heads": c.num_heads, "head_dim": c.head_dim,
        "local_num_layers": c.local_num_layers, "local_positions": c.local_max_len, "n_vq": c.n_vq,
        "codebook_sizes": list(c.audio_codebook_sizes), "audio_pad_id": c.audio_pad_id,
        "im_start_id": c.im_start_id, "im_end_id": c.im_end_id, "audio_start_id": c.audio_start_id,
        "audio_end_id": c.audio_end_id, "audio_user_slot_id": c.audio_user_slot_id,
        "audio_assistant_slot_id": c.audio_assistant_slot_id, "max_rows": max_rows,
        "sampling_params": list(SAMPLING_PARAMS),
    }


def export_onnx(out_dir: Path, lm: MossTTSNanoLM, codec: MossAudioCodec, options: ExportOptions | None = None
                ) -> dict:
    """Export the graphs of `lm` and `codec` (CPU fp32 modules) into `out_dir`; returns the written
    `graphs.json` description."""
    options = options or ExportOptions()
    out_dir.mkdir(parents=True, exist_ok=True)
    c = lm.config
    lm, codec = lm.float().cpu().eval(), codec.cpu().eval()
    rows = torch.full((1, 3, c.row_width), c.audio_pad_id, dtype=torch.long)
    rows[..., 0] = c.audio_start_id
    new = torch.export.Dim("new_rows", min=1, max=options.max_rows)
    capacity = torch.export.Dim("capacity", min=1, max=options.max_rows)
    # Distinct example tensors per input: the exporter merges inputs that are one tensor object.
    keys = [torch.zeros(1, c.num_heads, c.head_dim, 8) for _ in range(c.num_layers)]
    values = [torch.zeros(1, c.num_heads, 8, c.head_dim) for _ in range(c.num_layers)]
    _export(GlobalGraph(lm, options.max_rows).eval(), (rows, torch.tensor([2]), *keys, *values),
            out_dir / GRAPH_FILES["global"], ["rows", "length", *global_cache_names(c.num_layers)],
            ["hidden", "new_keys", "new_values"],
            ({1: new}, None, tuple([{3: capacity}] * c.num_layers + [{2: capacity}] * c.num_layers)))

    vocab = c.audio_codebook_sizes[0]
    _export(FrameGraph(lm).eval(), (torch.zeros(1, c.hidden_size), torch.zeros(1, c.n_vq, vocab, dtype=torch.bool),
                                    torch.full((1, 1 + c.n_vq), 0.5), torch.ones(1, len(SAMPLING_PARAMS))),
            out_dir / GRAPH_FILES["local"], ["hidden", "seen", "uniforms", "sampling_params"], ["go_on", "codes"], None)

    graph = CodecStepGraph(codec, options.codec_frames).eval()
    specs = codec_state_specs(graph.template)
    codes = torch.zeros(1, codec.config.quantizer.num_quantizers, options.codec_frames, dtype=torch.long)
    _export(graph, (codes, *graph.initial_state()), out_dir / GRAPH_FILES["codec"],
            ["codes", *(s.name for s in specs)], codec_output_names(specs), None)

    # The encoder (voice cloning in the browser) takes a fixed, zero-padded clip: its attention
    # blocks are laid out from the length, so one length means one graph.
    samples = options.clip_frames * codec.config.downsample_rate
    _export(CodecEncodeGraph(codec).eval(), (torch.zeros(1, codec.config.num_channels, samples),
                                             torch.tensor([samples // 2])),
            out_dir / GRAPH_FILES["encoder"], ["wav", "length"], ["codes", "frames"], None)

    for kind, name in GRAPH_FILES.items():
        _convert(out_dir / name, options.precision, "codec" if kind == "encoder" else kind)
    description = {
        "format": FORMAT_VERSION,
        "precision": options.precision,
        "graphs": GRAPH_FILES,
        "lm": lm_description(lm, options.max_rows),
        "codec": {
            "sample_rate": codec.config.sample_rate, "channels": codec.config.num_channels,
            "samples_per_frame": codec.config.downsample_rate, "frames_per_pass": options.codec_frames,
            "num_quantizers": codec.config.quantizer.num_quantizers, "state": [asdict(s) for s in specs],
            "clip_samples": samples,
        },
    }
    (out_dir / "graphs.json").write_text(json.dumps(description, indent=1), encoding="utf-8")
    logger.info("exported %s graphs to %s", options.precision, out_dir)
    return description
