"""Architecture config of the MOSS-Audio-Tokenizer-Nano codec, read from its checkpoint config.json.

Everything is taken from the file and validated; nothing falls back to the reference config class's
defaults, which describe the large 24 kHz model (docs/spec/CODEC.md §1.3).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError

_COMPUTE_DTYPES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True, slots=True)
class PatchSpec:
    """A parameter-free (un)patchify stage: `patch_size` adjacent tokens <-> channels."""

    patch_size: int


@dataclass(frozen=True, slots=True)
class TransformerSpec:
    """One projected causal transformer stage (docs/spec/CODEC.md §3.3): `rate_hz` is its token rate,
    `context_tokens` its sliding window, int(round(rate_hz * context_duration)) as the reference."""

    input_dim: int
    output_dim: int
    d_model: int
    num_heads: int
    num_layers: int
    dim_feedforward: int
    context_tokens: int
    rate_hz: float
    max_period: float
    layer_scale_init: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


StageSpec = PatchSpec | TransformerSpec


@dataclass(frozen=True, slots=True)
class QuantizerSpec:
    """Residual LFQ sizes (docs/spec/CODEC.md §3.5); training-only keys of the JSON are ignored."""

    input_dim: int
    rvq_dim: int
    output_dim: int
    num_quantizers: int
    codebook_size: int
    codebook_dim: int


@dataclass(frozen=True, slots=True)
class CodecConfig:
    """The whole codec: stage lists in order (encoder: waveform -> latent; decoder: latent -> waveform).

    `compute_dtype` is the config's own hint ("fp32" for Nano); `load_codec(dtype=...)` decides.
    """

    sample_rate: int
    num_channels: int
    downsample_rate: int  # samples per channel per code frame
    encoder: tuple[StageSpec, ...]
    decoder: tuple[StageSpec, ...]
    quantizer: QuantizerSpec
    compute_dtype: str = "fp32"

    @property
    def num_quantizers(self) -> int:
        return self.quantizer.num_quantizers

    @property
    def codebook_size(self) -> int:
        return self.quantizer.codebook_size

    def decoder_tokens_per_frame(self) -> list[int]:
        """Tokens each decoder transformer stage sees per code frame (4/8/16/32 for Nano)."""
        tokens, out = 1, []
        for stage in self.decoder:
            if isinstance(stage, PatchSpec):
                tokens *= stage.patch_size
            else:
                out.append(tokens)
        return out

    @classmethod
    def from_json(cls, source: str | os.PathLike | dict[str, Any]) -> CodecConfig:
        """Build from a config.json path or its parsed dict; raises ModelLoadError on anything odd."""
        if isinstance(source, dict):
            raw, where = source, "codec config"
        else:
            path = Path(os.fspath(source))
            if path.is_dir():
                path = path / "config.json"
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise ModelLoadError(f"cannot read codec config {path}: {exc}") from exc
            where = str(path)
        if not isinstance(raw, dict):
            raise ModelLoadError(f"{where}: expected a JSON object at the top level")
        return _parse(raw, where)


def _get(raw: dict[str, Any], where: str, *names: str, kind: type = int) -> Any:
    """The first present field of `names` as an int (kind=int) or a finite number (kind=float)."""
    for name in names:
        if name not in raw:
            continue
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ModelLoadError(f"{where}: {name} must be a number, got {value!r}")
        if kind is int:
            if not float(value).is_integer():
                raise ModelLoadError(f"{where}: {name} must be an integer, got {value!r}")
            return int(value)
        return float(value)
    raise ModelLoadError(f"{where}: missing required field {' / '.join(names)}")


def _positive(value: int, name: str, where: str) -> int:
    if value < 1:
        raise ModelLoadError(f"{where}: {name} must be >= 1, got {value}")
    return value


def _parse(raw: dict[str, Any], where: str) -> CodecConfig:
    sample_rate = _positive(_get(raw, where, "sampling_rate", "sample_rate"), "sampling_rate", where)
    channels = _positive(_get(raw, where, "number_channels", "channels_numbers"), "number_channels", where)
    downsample = _positive(_get(raw, where, "downsample_rate"), "downsample_rate", where)
    interleave = raw.get("enable_channel_interleave", False)
    if channels != 2 or interleave is not True:
        raise ModelLoadError(
            f"{where}: only the interleaved stereo layout (number_channels 2, enable_channel_interleave "
            f"true) is implemented, got number_channels={channels}, enable_channel_interleave={interleave!r}"
        )
    compute = raw.get("compute_dtype", raw.get("codec_compute_dtype", "fp32"))
    if compute not in _COMPUTE_DTYPES:
        raise ModelLoadError(f"{where}: compute_dtype must be one of {_COMPUTE_DTYPES}, got {compute!r}")
    quantizer_type = raw.get("quantizer_type", "rlfq")
    if quantizer_type != "rlfq":
        raise ModelLoadError(f"{where}: only quantizer_type 'rlfq' is implemented, got {quantizer_type!r}")
    qraw = raw.get("quantizer_kwargs")
    if not isinstance(qraw, dict):
        raise ModelLoadError(f"{where}: quantizer_kwargs must be an object")
    qwhere = f"{where} quantizer_kwargs"
    quantizer = QuantizerSpec(
        **{
            name: _positive(_get(qraw, qwhere, name), name, qwhere)
            for name in (
                "input_dim",
                "rvq_dim",
                "output_dim",
                "num_quantizers",
                "codebook_size",
                "codebook_dim",
            )
        }
    )
    # The interleaved stream runs at sample_rate * channels; every patch divides the token rate.
    stream_rate = float(sample_rate * channels)
    encoder = _parse_stages(raw.get("encoder_kwargs"), f"{where} encoder_kwargs", stream_rate, encode=True)
    decoder = _parse_stages(
        raw.get("decoder_kwargs"), f"{where} decoder_kwargs", sample_rate / downsample, encode=False
    )
    _check_chain(encoder, 1, quantizer.input_dim, "encoder", where, encode=True)
    _check_chain(decoder, quantizer.output_dim, 1, "decoder", where, encode=False)
    for name, stages in (("encoder", encoder), ("decoder", decoder)):
        product = math.prod(s.patch_size for s in stages if isinstance(s, PatchSpec))
        if product != downsample * channels:
            raise ModelLoadError(
                f"{where}: {name} patch sizes multiply to {product}, expected downsample_rate x "
                f"number_channels = {downsample * channels}"
            )
    return CodecConfig(
        sample_rate=sample_rate,
        num_channels=channels,
        downsample_rate=downsample,
        encoder=encoder,
        decoder=decoder,
        quantizer=quantizer,
        compute_dtype=compute,
    )


def _parse_stages(raw: Any, where: str, rate: float, *, encode: bool) -> tuple[StageSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise ModelLoadError(f"{where}: must be a non-empty list of stage objects")
    stages: list[StageSpec] = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise ModelLoadError(f"{at}: expected an object")
        module_type = item.get("module_type")
        if module_type == "PatchedPretransform":
            patch = _positive(_get(item, at, "patch_size"), "patch_size", at)
            stages.append(PatchSpec(patch))
            rate = rate / patch if encode else rate * patch
        elif module_type == "Transformer":
            stages.append(_parse_transformer(item, at, rate))
        else:
            raise ModelLoadError(f"{at}: unknown module_type {module_type!r}")
    return tuple(stages)


def _parse_transformer(item: dict[str, Any], at: str, rate: float) -> TransformerSpec:
    expected = {
        "causal": True,
        "gating": "none",
        "norm": "layer_norm",
        "positional_embedding": "rope",
        "conv_layout": True,
    }
    for key, want in expected.items():
        if item.get(key, want) != want:
            raise ModelLoadError(f"{at}: {key}={item.get(key)!r} is not supported (expected {want!r})")
    d_model = _positive(_get(item, at, "d_model"), "d_model", at)
    heads = _positive(_get(item, at, "num_heads"), "num_heads", at)
    if d_model % heads or (d_model // heads) % 2:
        raise ModelLoadError(f"{at}: d_model {d_model} / num_heads {heads} must be an even integer (RoPE)")
    duration = _get(item, at, "context_duration", kind=float)
    context = round(rate * duration)  # the reference: int(round(rate * context_duration))
    if context < 1:
        raise ModelLoadError(f"{at}: context_duration {duration} s at {rate} Hz gives an empty window")
    return TransformerSpec(
        input_dim=_positive(_get(item, at, "input_dimension"), "input_dimension", at),
        output_dim=_positive(_get(item, at, "output_dimension"), "output_dimension", at),
        d_model=d_model,
        num_heads=heads,
        num_layers=_positive(_get(item, at, "num_layers"), "num_layers", at),
        dim_feedforward=_positive(_get(item, at, "dim_feedforward"), "dim_feedforward", at),
        context_tokens=context,
        rate_hz=rate,
        max_period=_get(item, at, "max_period", kind=float),
        layer_scale_init=_get(item, at, "layer_scale", kind=float),
    )


def _check_chain(
    stages: tuple[StageSpec, ...], dim: int, final_dim: int, name: str, where: str, *, encode: bool
) -> None:
    """Follow the channel count through the stages so shape errors surface at load, not mid-decode."""
    for index, stage in enumerate(stages):
        if isinstance(stage, PatchSpec):
            if encode:
                dim *= stage.patch_size
            elif dim % stage.patch_size:
                raise ModelLoadError(
                    f"{where}: {name}[{index}] cannot unpatch {dim} channels by {stage.patch_size}"
                )
            else:
                dim //= stage.patch_size
        else:
            if stage.input_dim != dim:
                raise ModelLoadError(
                    f"{where}: {name}[{index}] input_dimension {stage.input_dim} != {dim} channels arriving"
                )
            dim = stage.output_dim
    if dim != final_dim:
        raise ModelLoadError(f"{where}: {name} ends with {dim} channels, expected {final_dim}")
