"""A request's text into the stream's `Segment`s: `build_segments`, a pure function.

`Synthesizer` checks a request and resolves its voice in the caller's thread; the engine thread
builds the segments (normalised, split, tokenised text and prompt rows) from the request and the
plan's read-only parts (template, tokenizer, limits, catalog), never calling back into the synthesizer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .config import EngineConfig
from .engine.stream import Segment
from .errors import InvalidRequestError
from .prompt import PromptTemplate, build_prompt_rows
from .text import detect_language, normalize_text, pause_after_chunk_s, split_text
from .tokenizer import TextTokenizer
from .types import SynthesisRequest, Voice
from .voices import ResolvedVoice
from .voices.catalog import VoiceCatalog

# Room left in a stream's KV cache for generated rows when checking prompt length.
MIN_GENERATION_ROWS = 32
# Frames per text token in ordinary speech (12.5 frames/s; roughly 4 tokens/s in English and
# Chinese alike): only an estimate for players that plan their buffering, never a cap.
FRAMES_PER_TOKEN = 3.2


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """What building segments reads, never writes: shared by every request of a synthesizer."""

    template: PromptTemplate
    tokenizer: TextTokenizer
    config: EngineConfig
    catalog: VoiceCatalog

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))


def build_segments(plan: SegmentPlan, request: SynthesisRequest, text: str,
                   resolved: ResolvedVoice | None) -> tuple[Segment, ...]:
    """A checked request's segments (`text` its checked text, `resolved` its voice): text normalised
    and split, tokenised, prompt rows per segment. Pure Python on the plan's read-only parts."""
    voice = request.voice if isinstance(request.voice, Voice) else None
    if request.normalize_text:
        text = normalize_text(text, language=detect_language(text, _voice_language(plan, resolved)))
    if request.mode == "voice_clone":
        segments = _voice_clone_segments(plan, text, resolved)
    else:
        segments = _continuation_segments(plan, text, voice, resolved)
    return tuple(_apply_frame_cap(segments, request.max_frames))


def _voice_language(plan: SegmentPlan, resolved: ResolvedVoice | None) -> str | None:
    if resolved is None or resolved.name is None:
        return None
    preset = plan.catalog.find(resolved.name)
    return preset.language if preset is not None else None


def _voice_clone_segments(plan: SegmentPlan, text: str, resolved: ResolvedVoice) -> list[Segment]:
    chunks = split_text(text, plan.count_tokens, max_tokens=plan.config.voice_clone_max_text_tokens)
    segments = []
    for index, chunk in enumerate(chunks):
        text_ids = plan.tokenizer.encode(chunk)
        rows = build_prompt_rows(plan.template, "voice_clone", text_ids, resolved.codes)
        _check_rows_fit(plan, rows)
        last = index == len(chunks) - 1
        segments.append(Segment(rows=rows, max_frames=default_max_frames(len(text_ids)),
                                pause_after_s=0.0 if last else pause_after_chunk_s(chunk),
                                prefix_rows=voice_clone_prefix_rows(plan.template, len(resolved.codes)),
                                text=chunk, estimated_frames=estimate_frames(len(text_ids))))
    return segments


def _continuation_segments(plan: SegmentPlan, text: str, voice: Voice | None,
                           resolved: ResolvedVoice | None) -> list[Segment]:
    if voice is None or resolved is None:
        text_ids = plan.tokenizer.encode(text)
        rows = build_prompt_rows(plan.template, "continuation", text_ids, None)
        _check_rows_fit(plan, rows)
        return [Segment(rows=rows, max_frames=default_max_frames(len(text_ids)),
                        prefix_rows=continuation_prefix_rows(plan.template), text=text,
                        estimated_frames=estimate_frames(len(text_ids)))]
    transcript = voice.transcript or resolved.transcript
    if not transcript:
        raise InvalidRequestError(
            "continuation mode with a reference voice needs the reference clip's transcript: "
            "pass ref_text (or use mode 'voice_clone', which needs no transcript)",
            param="ref_text",
        )
    # docs/spec/LM.md §4.4: the transcript and the new text are joined as one string, encoded once.
    text_ids = plan.tokenizer.encode(transcript + text)
    rows = build_prompt_rows(plan.template, "continuation", text_ids, resolved.codes)
    _check_rows_fit(plan, rows)
    new_tokens = max(1, len(text_ids) - plan.count_tokens(transcript))
    return [Segment(rows=rows, max_frames=default_max_frames(new_tokens), prime_codes=resolved.codes,
                    prefix_rows=continuation_prefix_rows(plan.template), text=text,
                    estimated_frames=estimate_frames(new_tokens))]


def voice_clone_prefix_rows(template: PromptTemplate, num_reference_frames: int) -> int:
    """Rows before the text in a voice-clone prompt (docs/spec/LM.md §4.3): user prefix, audio start,
    the reference frames, audio end, and the instruction block."""
    t = template
    return len(t.user_prefix) + 1 + num_reference_frames + 1 + len(t.after_reference)


def continuation_prefix_rows(template: PromptTemplate) -> int:
    """Rows before the text in a continuation prompt (docs/spec/LM.md §4.4)."""
    t = template
    return len(t.user_prefix) + len(t.no_reference) + len(t.after_reference)


def _check_rows_fit(plan: SegmentPlan, rows: np.ndarray) -> None:
    limit = plan.config.max_context_rows - MIN_GENERATION_ROWS
    if rows.shape[0] > limit:
        raise InvalidRequestError(
            f"the prompt is {rows.shape[0]} rows but at most {limit} fit: use a shorter reference clip "
            "or shorter text (voice_clone mode splits long text automatically)",
            param="input",
        )


def _apply_frame_cap(segments: list[Segment], max_frames: int | None) -> list[Segment]:
    if max_frames is None:
        return segments
    capped, left = [], max_frames
    for segment in segments:
        if left <= 0:
            break
        take = min(segment.max_frames, left)
        capped.append(replace(segment, max_frames=take))
        left -= take
    if capped:
        capped[-1] = replace(capped[-1], pause_after_s=0.0)
    return capped


def estimate_frames(num_text_tokens: int) -> int:
    """Likely frames for `num_text_tokens` tokens of text (see FRAMES_PER_TOKEN)."""
    return max(1, round(FRAMES_PER_TOKEN * max(1, num_text_tokens)))


def default_max_frames(num_text_tokens: int, *, cap: int = 375) -> int:
    """Generation cap proportional to the text: the model can run on for tens of seconds on
    very short text, so bound it by ~8 frames (0.64 s) per token plus 2 s, at most `cap` (30 s)."""
    return max(1, min(cap, 25 + 8 * max(1, num_text_tokens)))
