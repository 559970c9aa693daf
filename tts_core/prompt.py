"""Prompt rows of the global transformer (docs/spec/LM.md §4.2-4.4): pure functions of token ids and codes.

A row has `n_vq + 1` integer columns: column 0 the text/slot token, columns 1.. the codes.
Text rows carry the audio pad id in every code column; reference-audio rows carry a slot token
(user slot 8 in voice_clone, assistant slot 9 in continuation) and one code per codebook.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from .model.lm_config import LMConfig

PromptMode = Literal["voice_clone", "continuation"]

# Template pieces of the reference `prompting.py`. Each is tokenised by its own encode call: the
# per-call dummy prefix is part of the trained layout (docs/spec/LM.md §4.2).
USER_ROLE_PREFIX = "user\n"
USER_TEMPLATE_REFERENCE_PREFIX = "<user_inst>\n- Reference(s):\n"
USER_TEMPLATE_AFTER_REFERENCE = (
    "\n- Instruction:\nNone\n"
    "- Tokens:\nNone\n"
    "- Quality:\nNone\n"
    "- Sound Event:\nNone\n"
    "- Ambient Sound:\nNone\n"
    "- Language:\nNone\n"
    "- Text:\n"
)
NO_REFERENCE = "None"
USER_TEMPLATE_SUFFIX = "\n</user_inst>"
ASSISTANT_TURN_PREFIX = "\n"
ASSISTANT_ROLE_PREFIX = "assistant\n"


class _Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """The fixed id blocks of the chat template plus the ids a row layout needs (with the released
    tokenizer: user_prefix 13 ids, no_reference 2, after_reference 56, assistant_prefix 6)."""

    user_prefix: tuple[int, ...]  # [im_start] + enc("user\n") + enc("<user_inst>\n- Reference(s):\n")
    no_reference: tuple[int, ...]  # enc("None"), stands in for the reference when there is no audio
    after_reference: tuple[int, ...]  # enc("\n- Instruction:\nNone\n ... - Text:\n")
    assistant_prefix: tuple[int, ...]  # enc("\n</user_inst>") + [im_end] + enc("\n") + [im_start] + enc(...)
    audio_start_id: int
    audio_end_id: int
    user_slot_id: int
    assistant_slot_id: int
    audio_pad_id: int
    codebook_sizes: tuple[int, ...]

    @property
    def n_vq(self) -> int:
        return len(self.codebook_sizes)

    @classmethod
    def from_tokenizer(cls, tokenizer: _Encoder, config: LMConfig) -> PromptTemplate:
        enc = tokenizer.encode
        return cls(
            user_prefix=(config.im_start_id, *enc(USER_ROLE_PREFIX), *enc(USER_TEMPLATE_REFERENCE_PREFIX)),
            no_reference=tuple(enc(NO_REFERENCE)),
            after_reference=tuple(enc(USER_TEMPLATE_AFTER_REFERENCE)),
            assistant_prefix=(
                *enc(USER_TEMPLATE_SUFFIX),
                config.im_end_id,
                *enc(ASSISTANT_TURN_PREFIX),
                config.im_start_id,
                *enc(ASSISTANT_ROLE_PREFIX),
            ),
            audio_start_id=config.audio_start_id,
            audio_end_id=config.audio_end_id,
            user_slot_id=config.audio_user_slot_id,
            assistant_slot_id=config.audio_assistant_slot_id,
            audio_pad_id=config.audio_pad_id,
            codebook_sizes=tuple(config.audio_codebook_sizes),
        )


def text_rows(template: PromptTemplate, token_ids: Sequence[int]) -> np.ndarray:
    """[N, n_vq + 1] rows of text tokens: codes all set to the audio pad id."""
    rows = np.full((len(token_ids), template.n_vq + 1), template.audio_pad_id, dtype=np.int64)
    rows[:, 0] = np.asarray(token_ids, dtype=np.int64)
    return rows


def audio_rows(template: PromptTemplate, codes: np.ndarray, slot_id: int) -> np.ndarray:
    """[F, n_vq + 1] rows of reference audio: the slot token followed by the frame's codes."""
    rows = np.empty((codes.shape[0], template.n_vq + 1), dtype=np.int64)
    rows[:, 0] = slot_id
    rows[:, 1:] = codes
    return rows


def validate_codes(template: PromptTemplate, codes: np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
    """Check reference codes [F, n_vq] (integers, each column inside its codebook); return int64."""
    array = np.asarray(codes)
    if array.ndim != 2 or array.shape[1] != template.n_vq or array.shape[0] < 1:
        raise ValueError(
            f"prompt codes must have shape [frames, {template.n_vq}] with frames >= 1, "
            f"got {list(array.shape)}: "
            "transpose codec output [n_vq, frames] to [frames, n_vq]"
        )
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"prompt codes must be integers, got dtype {array.dtype}")
    sizes = np.asarray(template.codebook_sizes, dtype=np.int64)
    bad = (array < 0) | (array >= sizes[None, :])
    if bad.any():
        frame, channel = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(
            f"prompt code {int(array[frame, channel])} at frame {frame}, codebook {channel} is outside "
            f"[0, {int(sizes[channel])}): codes must come from the matching codec"
        )
    return np.ascontiguousarray(array, dtype=np.int64)


def _validate_text_ids(text_ids: Sequence[int]) -> list[int]:
    ids = [int(i) for i in text_ids]
    if any(i < 0 for i in ids):
        raise ValueError("text ids must be non-negative token ids")
    return ids


def build_prompt_rows(
    template: PromptTemplate,
    mode: PromptMode,
    text_ids: Sequence[int],
    prompt_codes: np.ndarray | None = None,
) -> np.ndarray:
    """Rows [T, n_vq + 1] (int64) of one prompt.

    Args:
        template: the id blocks, from `PromptTemplate.from_tokenizer`.
        mode: "voice_clone" (needs `prompt_codes`: the reference audio sits in the user turn) or
            "continuation" (optional `prompt_codes`: the assistant turn starts with them).
        text_ids: the ids of the text to say. For continuation with reference codes the caller
            encodes `prompt_text + text` as ONE string (docs/spec/LM.md §4.4).
        prompt_codes: reference codes [F, n_vq].
    """
    ids = _validate_text_ids(text_ids)
    t = template
    if mode == "voice_clone":
        if prompt_codes is None:
            raise ValueError("voice_clone mode needs reference codes: pass prompt_codes [frames, n_vq]")
        codes = validate_codes(t, prompt_codes)
        head = [*t.user_prefix, t.audio_start_id]
        tail = [t.audio_end_id, *t.after_reference, *ids, *t.assistant_prefix, t.audio_start_id]
        return np.concatenate([text_rows(t, head), audio_rows(t, codes, t.user_slot_id), text_rows(t, tail)])
    if mode == "continuation":
        head = [
            *t.user_prefix,
            *t.no_reference,
            *t.after_reference,
            *ids,
            *t.assistant_prefix,
            t.audio_start_id,
        ]
        parts = [text_rows(t, head)]
        if prompt_codes is not None:
            parts.append(audio_rows(t, validate_codes(t, prompt_codes), t.assistant_slot_id))
        return np.concatenate(parts)
    raise ValueError(f"mode must be 'voice_clone' or 'continuation', got {mode!r}")
