"""Architecture of the MOSS-TTS-Nano LM, read from the checkpoint's config.json (docs/spec/LM.md §1).

Every value comes from the file. The Python config class of the reference has Qwen-style defaults
that do not match the released checkpoint (docs/spec/LM.md §1.2), so a missing key is an error here rather
than a silent fallback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SUPPORTED_ACTIVATION = "gelu_new"
_SUPPORTED_POSITIONS = "rope"


def _require(source: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in source:
        raise ValueError(
            f"LM config is missing {where}{key!r}: use the config.json shipped with the checkpoint "
            "(the reference class defaults do not match the released model, so none are assumed)"
        )
    return source[key]


def _as_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"LM config key {key!r} must be an integer, got {value!r}")
    return value


def _as_float(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"LM config key {key!r} must be a number, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class LMConfig:
    """Sizes and special ids of the global/local transformer pair.

    The local transformer shares every width with the global one; only its depth differs.
    """

    hidden_size: int
    num_layers: int
    num_heads: int
    inner_size: int
    layer_norm_eps: float
    rope_base: float
    text_vocab_size: int
    local_num_layers: int
    n_vq: int
    audio_vocab_size: int
    audio_codebook_sizes: tuple[int, ...]
    audio_pad_id: int
    pad_id: int
    im_start_id: int
    im_end_id: int
    audio_start_id: int
    audio_end_id: int
    audio_user_slot_id: int
    audio_assistant_slot_id: int

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "inner_size", "text_vocab_size", "n_vq"):
            if getattr(self, name) < 1:
                raise ValueError(f"LM config {name} must be >= 1, got {getattr(self, name)}")
        if self.local_num_layers < 1:
            raise ValueError(f"local_transformer_layers must be >= 1, got {self.local_num_layers}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"gpt2_config.n_embd={self.hidden_size} is not divisible by n_head={self.num_heads}: "
                "fix n_head so that every head has the same width"
            )
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}: fix n_embd / n_head")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"gpt2_config.layer_norm_epsilon must be > 0, got {self.layer_norm_eps}")
        if not self.rope_base > 1:
            raise ValueError(f"gpt2_config.rope_base must be > 1, got {self.rope_base}")
        if len(self.audio_codebook_sizes) != self.n_vq:
            raise ValueError(
                f"audio_codebook_sizes has {len(self.audio_codebook_sizes)} entries but n_vq={self.n_vq}: "
                "give one size per codebook"
            )
        if min(self.audio_codebook_sizes) < 1:
            raise ValueError(f"audio_codebook_sizes must all be >= 1, got {list(self.audio_codebook_sizes)}")
        largest = max(self.audio_codebook_sizes)
        if self.audio_vocab_size < largest:
            raise ValueError(
                f"audio_vocab_size={self.audio_vocab_size} is smaller than the largest codebook ({largest})"
            )
        if self.audio_pad_id < largest:
            raise ValueError(
                f"audio_pad_token_id={self.audio_pad_id} collides with a code of a {largest}-entry codebook: "
                f"it must be >= {largest} so that padded audio columns are distinguishable"
            )
        for name in self.special_id_names():
            value = getattr(self, name)
            if not 0 <= value < self.text_vocab_size:
                raise ValueError(
                    f"LM config special id {name}={value} is outside the text vocabulary "
                    f"[0, {self.text_vocab_size})"
                )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def row_width(self) -> int:
        """Columns of one global row: the text/slot token plus one code per codebook."""
        return self.n_vq + 1

    @property
    def local_max_len(self) -> int:
        """Positions of the per-frame local sequence: the global state, the slot token, n_vq - 1 codes."""
        return self.n_vq + 1

    @staticmethod
    def special_id_names() -> tuple[str, ...]:
        return (
            "pad_id",
            "im_start_id",
            "im_end_id",
            "audio_start_id",
            "audio_end_id",
            "audio_user_slot_id",
            "audio_assistant_slot_id",
        )

    @classmethod
    def from_json(cls, path_or_dict: str | os.PathLike | Mapping[str, Any]) -> LMConfig:
        """Build from a config.json path (or its parsed dict). Raises ValueError naming the bad key."""
        if isinstance(path_or_dict, Mapping):
            raw = path_or_dict
        else:
            path = Path(os.fspath(path_or_dict))
            with path.open(encoding="utf-8") as handle:
                raw = json.load(handle)
            if not isinstance(raw, Mapping):
                raise ValueError(f"{path} does not hold a JSON object")
        gpt2 = _require(raw, "gpt2_config", "")
        if not isinstance(gpt2, Mapping):
            raise ValueError("LM config 'gpt2_config' must be a JSON object (the nested GPT-2 config)")
        g = "gpt2_config."

        activation = _require(gpt2, "activation_function", g)
        if activation != _SUPPORTED_ACTIVATION:
            raise ValueError(
                f"gpt2_config.activation_function={activation!r} is not supported: "
                f"MOSS-TTS-Nano uses {_SUPPORTED_ACTIVATION!r}"
            )
        positions = _require(gpt2, "position_embedding_type", g)
        if str(positions).lower() != _SUPPORTED_POSITIONS:
            raise ValueError(
                f"gpt2_config.position_embedding_type={positions!r} is not supported: only 'rope' "
                "(absolute position tables are not implemented)"
            )
        # GPT-2 options that would change the attention math if set away from the GPT-2 defaults.
        if gpt2.get("scale_attn_weights", True) is not True:
            raise ValueError("gpt2_config.scale_attn_weights must be true (attention scale 1/sqrt(head_dim))")
        if gpt2.get("scale_attn_by_inverse_layer_idx", False):
            raise ValueError("gpt2_config.scale_attn_by_inverse_layer_idx=true is not supported")

        hidden = _as_int(_require(gpt2, "n_embd", g), "gpt2_config.n_embd")
        top_hidden = raw.get("hidden_size")
        if top_hidden is not None and top_hidden != hidden:
            raise ValueError(
                f"hidden_size={top_hidden} disagrees with gpt2_config.n_embd={hidden}: make them equal"
            )
        inner = _require(gpt2, "n_inner", g)
        # GPT-2 semantics: n_inner = null means 4 * n_embd (an explicit value of the file, not a default).
        inner_size = 4 * hidden if inner is None else _as_int(inner, "gpt2_config.n_inner")

        n_vq = _as_int(_require(raw, "n_vq", ""), "n_vq")
        audio_vocab = _as_int(_require(raw, "audio_vocab_size", ""), "audio_vocab_size")
        sizes_raw = raw.get("audio_codebook_sizes")
        if sizes_raw is None:
            # The reference derives the sizes from audio_vocab_size when the key is null or absent.
            sizes = (audio_vocab,) * n_vq
        else:
            if not isinstance(sizes_raw, (list, tuple)):
                raise ValueError(f"audio_codebook_sizes must be a list of integers, got {sizes_raw!r}")
            sizes = tuple(_as_int(v, "audio_codebook_sizes") for v in sizes_raw)
        top_vocab = raw.get("vocab_size")
        text_vocab = _as_int(_require(gpt2, "vocab_size", g), "gpt2_config.vocab_size")
        if top_vocab is not None and top_vocab != text_vocab:
            raise ValueError(
                f"vocab_size={top_vocab} disagrees with gpt2_config.vocab_size={text_vocab}: make them equal"
            )

        def top_int(key: str) -> int:
            return _as_int(_require(raw, key, ""), key)

        return cls(
            hidden_size=hidden,
            num_layers=_as_int(_require(gpt2, "n_layer", g), "gpt2_config.n_layer"),
            num_heads=_as_int(_require(gpt2, "n_head", g), "gpt2_config.n_head"),
            inner_size=inner_size,
            layer_norm_eps=_as_float(
                _require(gpt2, "layer_norm_epsilon", g), "gpt2_config.layer_norm_epsilon"
            ),
            rope_base=_as_float(_require(gpt2, "rope_base", g), "gpt2_config.rope_base"),
            text_vocab_size=text_vocab,
            local_num_layers=top_int("local_transformer_layers"),
            n_vq=n_vq,
            audio_vocab_size=audio_vocab,
            audio_codebook_sizes=sizes,
            audio_pad_id=top_int("audio_pad_token_id"),
            pad_id=top_int("pad_token_id"),
            im_start_id=top_int("im_start_token_id"),
            im_end_id=top_int("im_end_token_id"),
            audio_start_id=top_int("audio_start_token_id"),
            audio_end_id=top_int("audio_end_token_id"),
            audio_user_slot_id=top_int("audio_user_slot_token_id"),
            audio_assistant_slot_id=top_int("audio_assistant_slot_token_id"),
        )
