"""`python -m tts_core export-onnx OUT --lm DIR --codec DIR [--precision fp32,int8,fp16]`.

Writes the graphs of `onnx_graphs` at each precision asked for (`precision.py`: fp32 exact, int8
for wasm, fp16 for WebGPU) and `graphs.json`, the description a runtime needs to drive them
(token ids, shapes, the codec's state layout, and per precision its files). The graphs are
exported once in fp32 and converted from there; the clip encoder stays fp32 in every precision
(cloning must give the server's codes), and the codec decoder stays fp32 under int8 unless
`quantize_codec` (its output is the audio itself).

The exporters print a great deal; it is kept out of the output unless this module's logger is
at DEBUG (`python -m tts_core --verbose`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
import warnings
from collections.abc import Iterator
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
from .precision import PRECISIONS, convert

logger = logging.getLogger(__name__)

GRAPH_STEMS = {"global": "lm_global", "local": "lm_local", "codec": "codec_decode", "encoder": "codec_encode"}
SPEAK_GRAPHS = ("global", "local", "codec")  # what speaking needs; the encoder only serves cloning
FORMAT_VERSION = 2
OPSET = 18


@dataclass(frozen=True)
class ExportOptions:
    precisions: tuple[str, ...] = ("fp32",)
    max_rows: int = 4096  # prompt rows + frames one segment may hold (bounds the RoPE table)
    codec_frames: int = 1  # frames per codec pass (the browser decodes frame by frame)
    clip_frames: int = 250  # the encoder's fixed input: 250 frames = 20 s, the voice bank's clip cap
    quantize_codec: bool = False  # int8 also for the codec decoder's matrices

    def __post_init__(self) -> None:
        if isinstance(self.precisions, str):
            object.__setattr__(self, "precisions", tuple(p for p in self.precisions.split(",") if p))
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad or not self.precisions or len(set(self.precisions)) != len(self.precisions):
            raise ValueError(f"precisions must be distinct ones of {', '.join(PRECISIONS)}, got "
                             f"{','.join(self.precisions) or 'none'}")
        if self.max_rows < 2 or self.codec_frames < 1 or self.clip_frames < 1:
            raise ValueError("max_rows must be >= 2, codec_frames and clip_frames >= 1")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the exporters and converters (their prints, warnings and log records) unless this
    module logs at DEBUG."""
    if logger.isEnabledFor(logging.DEBUG):
        yield
        return
    sink = io.StringIO()
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _export(module: torch.nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str],
            dynamic: dict | tuple | None) -> None:
    with torch.no_grad(), quiet():
        torch.onnx.export(module, args, str(path), dynamo=True, input_names=inputs, output_names=outputs,
                          dynamic_shapes=dynamic, opset_version=OPSET, optimize=True, external_data=False,
                          verbose=False)


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


def _export_fp32(scratch: Path, lm: MossTTSNanoLM, codec: MossAudioCodec, options: ExportOptions) -> list:
    """The four graphs in fp32 into `scratch` (named by GRAPH_STEMS); returns the codec state specs."""
    c = lm.config
    rows = torch.full((1, 3, c.row_width), c.audio_pad_id, dtype=torch.long)
    rows[..., 0] = c.audio_start_id
    new = torch.export.Dim("new_rows", min=1, max=options.max_rows)
    capacity = torch.export.Dim("capacity", min=1, max=options.max_rows)
    # Distinct example tensors per input: the exporter merges inputs that are one tensor object.
    keys = [torch.zeros(1, c.num_heads, c.head_dim, 8) for _ in range(c.num_layers)]
    values = [torch.zeros(1, c.num_heads, 8, c.head_dim) for _ in range(c.num_layers)]
    _export(GlobalGraph(lm, options.max_rows).eval(), (rows, torch.tensor([2]), *keys, *values),
            scratch / "lm_global.onnx", ["rows", "length", *global_cache_names(c.num_layers)],
            ["hidden", "new_keys", "new_values"],
            ({1: new}, None, tuple([{3: capacity}] * c.num_layers + [{2: capacity}] * c.num_layers)))
    logger.info("exported the global transformer")

    vocab = c.audio_codebook_sizes[0]
    _export(FrameGraph(lm).eval(), (torch.zeros(1, c.hidden_size), torch.zeros(1, c.n_vq, vocab, dtype=torch.bool),
                                    torch.full((1, 1 + c.n_vq), 0.5), torch.ones(1, len(SAMPLING_PARAMS))),
            scratch / "lm_local.onnx", ["hidden", "seen", "uniforms", "sampling_params"], ["go_on", "codes"], None)
    logger.info("exported the frame graph")

    graph = CodecStepGraph(codec, options.codec_frames).eval()
    specs = codec_state_specs(graph.template)
    codes = torch.zeros(1, codec.config.quantizer.num_quantizers, options.codec_frames, dtype=torch.long)
    _export(graph, (codes, *graph.initial_state()), scratch / "codec_decode.onnx",
            ["codes", *(s.name for s in specs)], codec_output_names(specs), None)

    # The encoder (voice cloning in the browser) takes a fixed, zero-padded clip: its attention
    # blocks are laid out from the length, so one length means one graph.
    samples = options.clip_frames * codec.config.downsample_rate
    _export(CodecEncodeGraph(codec).eval(), (torch.zeros(1, codec.config.num_channels, samples),
                                             torch.tensor([samples // 2])),
            scratch / "codec_encode.onnx", ["wav", "length"], ["codes", "frames"], None)
    logger.info("exported the codec")
    return specs


def export_onnx(out_dir: Path, lm: MossTTSNanoLM, codec: MossAudioCodec, options: ExportOptions | None = None
                ) -> dict:
    """Export the graphs of `lm` and `codec` (CPU fp32 modules) into `out_dir` at each of
    `options.precisions`; returns the written `graphs.json` description."""
    options = options or ExportOptions()
    out_dir.mkdir(parents=True, exist_ok=True)
    lm, codec = lm.float().cpu().eval(), codec.cpu().eval()
    sets: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        specs = _export_fp32(scratch, lm, codec, options)
        written: set[str] = set()
        for precision in options.precisions:
            files = {}
            for kind, stem in GRAPH_STEMS.items():
                # The encoder is fp32 everywhere; the codec decoder is fp32 under int8 unless asked.
                at = "fp32" if kind == "encoder" or (precision == "int8" and kind == "codec"
                                                      and not options.quantize_codec) else precision
                name = f"{stem}.{at}.onnx"
                if name not in written:
                    with quiet():
                        convert(scratch / f"{stem}.onnx", out_dir / name, at)
                    written.add(name)
                files[kind] = name
            sets[precision] = files
            logger.info("wrote the %s graphs", precision)
    samples = options.clip_frames * codec.config.downsample_rate
    description = {
        "format": FORMAT_VERSION,
        "precisions": sets,
        "speak": list(SPEAK_GRAPHS),
        "lm": lm_description(lm, options.max_rows),
        "codec": {
            "sample_rate": codec.config.sample_rate, "channels": codec.config.num_channels,
            "samples_per_frame": codec.config.downsample_rate, "frames_per_pass": options.codec_frames,
            "num_quantizers": codec.config.quantizer.num_quantizers, "state": [asdict(s) for s in specs],
            "clip_samples": samples,
        },
    }
    (out_dir / "graphs.json").write_text(json.dumps(description, indent=1), encoding="utf-8")
    logger.info("exported %s graphs to %s", ",".join(options.precisions), out_dir)
    return description
