"""Requests into engine jobs: the checked request, the plan it is built with, and `build_job`.

`Synthesizer` checks a request and resolves its voice in the caller's thread (`CheckedRequest`);
the engine thread turns it into a `StreamJob` through `JobRequest.build` (`engine/intake.py`),
which runs `build_job`: a function of the request and of the plan's read-only parts (template,
tokenizer, limits, catalog) that never calls back into the synthesizer.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace

import numpy as np

from .config import EngineConfig
from .engine.pacing import default_max_frames, estimate_frames
from .engine.types import Segment, StreamJob
from .errors import InvalidRequestError
from .prompt import PromptTemplate, build_prompt_rows
from .text import detect_language, normalize_text, pause_after_chunk_s, split_text
from .tokenizer import TextTokenizer
from .types import SynthesisRequest, Voice
from .voices import ResolvedVoice
from .voices.catalog import VoiceCatalog

# Room left in a stream's KV cache for generated rows when checking prompt length.
MIN_GENERATION_ROWS = 32


@dataclass(frozen=True, slots=True)
class CheckedRequest:
    """A request past the checks that may be slow but hold the interpreter lock little (the
    caller's thread): its text and resolved voice."""

    request: SynthesisRequest
    text: str
    voice: Voice | None
    resolved: ResolvedVoice | None
    submitted_at: float


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What building a job reads, never writes: shared by every request of a synthesizer."""

    template: PromptTemplate
    tokenizer: TextTokenizer
    config: EngineConfig
    catalog: VoiceCatalog

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A checked request and its plan: the `engine.intake.Buildable` the engine thread builds."""

    plan: JobPlan
    checked: CheckedRequest

    def build(self, request_id: str) -> StreamJob:
        return build_job(self.plan, self.checked, request_id)


def build_job(plan: JobPlan, checked: CheckedRequest, request_id: str) -> StreamJob:
    """A checked request's job: text normalised and split, tokenised, prompt rows per segment.
    Pure Python on the plan's read-only parts (the engine thread runs it, `engine/intake.py`)."""
    request, text, voice, resolved = checked.request, checked.text, checked.voice, checked.resolved
    if request.normalize_text:
        text = normalize_text(text, language=detect_language(text, _voice_language(plan, resolved)))
    seed = request.seed if request.seed is not None else secrets.randbits(63)
    if request.mode == "voice_clone":
        segments = _voice_clone_segments(plan, text, resolved)
    else:
        segments = _continuation_segments(plan, text, voice, resolved)
    segments = _apply_frame_cap(segments, request.max_frames)
    return StreamJob(request_id=request_id, segments=tuple(segments), sampling=request.sampling,
                     seed=seed, submitted_at=checked.submitted_at,
                     notice=resolved.notice if resolved is not None else None)


def _voice_language(plan: JobPlan, resolved: ResolvedVoice | None) -> str | None:
    if resolved is None or resolved.name is None:
        return None
    preset = plan.catalog.find(resolved.name)
    return preset.language if preset is not None else None


def _voice_clone_segments(plan: JobPlan, text: str, resolved: ResolvedVoice) -> list[Segment]:
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


def _continuation_segments(plan: JobPlan, text: str, voice: Voice | None,
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


def _check_rows_fit(plan: JobPlan, rows: np.ndarray) -> None:
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
