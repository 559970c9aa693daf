"""The public streaming API: `Synthesizer.from_pretrained(...)`, `stream(request)`, `synthesize(request)`.

Front half (caller's thread): validate and normalise text, resolve the voice to reference codes,
split long text, build prompt rows. Back half: the engine thread generates frames and decodes
them into 48 kHz stereo chunks. Closing the iterator returned by `stream` cancels the request.
"""

from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .config import DEFAULT_CODEC_ID, DEFAULT_LM_ID, EngineConfig, SamplingParams
from .engine.engine import Engine
from .engine.features import EngineFeatures
from .engine.outbox import handle_chunks
from .engine.pacing import default_max_frames, estimate_frames
from .engine.pool import EnginePool
from .engine.types import Segment, StreamJob
from .errors import InvalidRequestError, TTSError
from .loader import load_parts
from .model.lm_config import LMConfig
from .preparer import Preparer
from .prompt import PromptTemplate, build_prompt_rows
from .text import check_text, detect_language, normalize_text, pause_after_chunk_s, split_text
from .tokenizer import TextTokenizer
from .types import SAMPLE_RATE_HZ, AudioChunk, SynthesisRequest, SynthesisResult, Timings, Voice
from .voices import PresetInfo, ResolvedVoice, VoiceBank

logger = logging.getLogger(__name__)

# Room left in a stream's KV cache for generated rows when checking prompt length.
_MIN_GENERATION_ROWS = 32


@dataclass(frozen=True, slots=True)
class _Checked:
    """A request past the checks that may be slow but hold the interpreter lock little (see
    `Synthesizer.prepare`): its text and resolved voice."""

    request: SynthesisRequest
    text: str
    voice: Voice | None
    resolved: ResolvedVoice | None
    submitted_at: float


class Synthesizer:
    """Text in, 48 kHz stereo chunks out. Thread-safe: many `stream()` calls may run at once.

    Build it with `Synthesizer.from_pretrained`; `tts_core.loader` loads its parts.
    """

    sample_rate = SAMPLE_RATE_HZ

    def __init__(self, *, tokenizer: TextTokenizer, engine: Engine | EnginePool, voices: VoiceBank,
                 config: EngineConfig, info: dict, lm_config: LMConfig, prepare_on_engine: bool = True):
        self.tokenizer = tokenizer
        self.template = PromptTemplate.from_tokenizer(tokenizer, lm_config)
        self.engine = engine
        self.voices = voices
        self.config = config
        self.info = dict(info)
        self.warm = False
        # Requests are turned into prompt rows on the engine's thread (`preparer.py`); None: in each
        # caller's (an engine without intake; `prepare_on_engine=False` only for tests comparing the two).
        self._preparer = None
        if hasattr(engine, "attach_intake") and prepare_on_engine:
            self._preparer = Preparer(self._build_job, engine.submit, engine.cancel)
            engine.attach_intake(self._preparer)

    @classmethod
    def from_pretrained(cls, lm: str = DEFAULT_LM_ID, codec: str = DEFAULT_CODEC_ID, *, device: str = "auto",
                        dtype: str = "auto", tokenizer: str | None = None, voices_dir: str | Path | None = None,
                        engine_config: EngineConfig | None = None, cache_dir: str | Path | None = None,
                        allow_download: bool | None = None, warmup: bool = True, quantize: str | None = None,
                        report: Callable[[str], None] | None = None,
                        devices: str | Sequence[str] | None = None) -> Synthesizer:
        """Load the LM and the codec (Hub ids or local directories) and start the engine.

        Args:
            lm, codec: Hugging Face ids or local directories with config.json and weights.
            device: "auto" (CUDA when present), "cpu", "cuda", "cuda:1".
            dtype: LM precision, "auto" = bf16 on CUDA, fp32 on CPU. The codec stays fp32.
            tokenizer: path to tokenizer.model; default: the one in the LM directory.
            voices_dir: local folder with the presets' reference clips (else they are downloaded
                when allowed, or reported unavailable).
            engine_config: slots, queue and text limits.
            cache_dir: where encoded voice codes are cached (default ~/.cache/moss_tts_studio).
            allow_download: fetch preset clips from the network (default: unless HF_HUB_OFFLINE=1).
            warmup: run a short generation so the first listener does not pay for it.
            quantize: None (default, fp32 on CPU) or "int8": int8 dynamic quantisation of the LM and
                codec linear layers on CPU, faster but not bit-faithful (see `bench --fidelity`).
            report: callback receiving human-readable progress lines.
            devices: engines' devices, e.g. "cuda:0,cuda:1": one engine per device, each request
                going to the least loaded. Default: every visible GPU when `device` is "auto" or
                "cuda", else `device` alone.
        """
        report = report or (lambda _line: None)
        config = engine_config or EngineConfig()
        parts = load_parts(lm=lm, codec=codec, device=device, dtype=dtype, tokenizer=tokenizer,
                           voices_dir=voices_dir, engine_config=config, cache_dir=cache_dir,
                           allow_download=allow_download, quantize=quantize, report=report, devices=devices)
        synth = cls(tokenizer=parts.tokenizer, engine=parts.engine, voices=parts.voices, config=config,
                    info=parts.info, lm_config=parts.lm_config)
        if warmup:
            report("warming up…")
            synth.warmup()
            # Preset voices' prompt prefixes are computed in the background, so each preset's
            # first request is already as fast as its later ones.
            threading.Thread(target=synth.warm_voices, name="voice-warm", daemon=True).start()
        logger.info("synthesizer ready: %s", json.dumps(synth.info))
        for features in synth.features():
            logger.info("engine on %s", features.summary())
        return synth

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    # ---- voices --------------------------------------------------------------------------------

    def list_voices(self) -> list[PresetInfo]:
        return self.voices.list_presets()

    def voice_clip_path(self, name: str) -> Path | None:
        return self.voices.clip_path(name)

    @property
    def default_voice(self) -> str:
        return self.voices.default_voice

    # ---- synthesis -----------------------------------------------------------------------------

    def stream(self, request: SynthesisRequest, *, cancel: threading.Event | None = None) -> Iterator[AudioChunk]:
        """Yield audio chunks as they are generated; the last one has `is_last=True`.

        Input errors raise on the first `next()`, before any audio. Closing the iterator (or
        dropping it) cancels the request and frees its engine slot at once. `cancel`, set from
        another thread, does the same even while this iterator is blocked waiting for a chunk
        (e.g. a request still queued when its HTTP client goes away); the iterator then ends.
        """
        submitted_at = time.monotonic()
        if self._preparer is None:
            handle = self.engine.submit(self.prepare(request, submitted_at=submitted_at))
        else:
            pending = self._preparer.enqueue(self._check(request, submitted_at))
            try:
                handle = self._preparer.wait(pending, cancel)
            except BaseException:  # (its own error too, where abandoning changes nothing)
                self._preparer.abandon(pending)
                raise
            if handle is None:  # cancelled while it waited to be prepared
                return
        yield from handle_chunks(self.engine, handle, lambda: self._next_item(handle, cancel))

    @staticmethod
    def _next_item(handle, cancel: threading.Event | None):
        if cancel is None:
            return handle.outbox.get()
        while not cancel.is_set():
            try:
                return handle.outbox.get(timeout=0.05)
            except queue.Empty:
                continue
        return None

    def synthesize(self, request: SynthesisRequest) -> SynthesisResult:
        """The whole result at once (same audio as concatenating `stream` chunks)."""
        request_id = ""
        pcm_parts: list[np.ndarray] = []
        code_parts: list[np.ndarray] = []
        timings = Timings(first_audio_s=None, elapsed_s=0.0, audio_s=0.0)
        notice = None
        for chunk in self.stream(request):
            request_id = chunk.request_id
            notice = notice or chunk.notice
            pcm_parts.append(chunk.pcm)
            if len(chunk.codes):
                code_parts.append(chunk.codes)
            timings = chunk.timings
        pcm = np.concatenate(pcm_parts, axis=1) if pcm_parts else np.zeros((2, 0), np.float32)
        codes = np.concatenate(code_parts) if code_parts else np.zeros((0, 16), np.int64)
        return SynthesisResult(pcm=pcm, sample_rate=SAMPLE_RATE_HZ, codes=codes, timings=timings,
                               request_id=request_id, notice=notice)

    def prepare(self, request: SynthesisRequest, *, submitted_at: float | None = None) -> StreamJob:
        """Validate and turn a request into prompt segments (pure CPU work, no model calls
        except encoding an uploaded reference clip once)."""
        return self._build_job(self._check(request, submitted_at if submitted_at is not None else time.monotonic()))

    def _check(self, request: SynthesisRequest, submitted_at: float) -> _Checked:
        """Prepare's first half, in the caller's thread: type and length checks, and the voice (which
        may encode an uploaded clip, model work that mostly runs without the interpreter lock)."""
        if not isinstance(request, SynthesisRequest):
            raise InvalidRequestError("expected a SynthesisRequest", param="request")
        text = check_text(request.text, self.config.max_text_chars)
        voice = request.voice if isinstance(request.voice, Voice) else None
        resolved = None
        if request.mode == "voice_clone" or voice is not None:
            resolved = self.voices.resolve(voice)  # None -> the default preset
        return _Checked(request, text, voice, resolved, submitted_at)

    def _build_job(self, checked: _Checked) -> StreamJob:
        """Prepare's second half (pure Python: on the engine thread when it prepares, `preparer.py`)."""
        request, text, voice, resolved = checked.request, checked.text, checked.voice, checked.resolved
        if request.normalize_text:
            text = normalize_text(text, language=detect_language(text, self._voice_language(resolved)))
        seed = request.seed if request.seed is not None else secrets.randbits(63)
        if request.mode == "voice_clone":
            segments = self._voice_clone_segments(text, resolved)
        else:
            segments = self._continuation_segments(text, voice, resolved)
        segments = self._apply_frame_cap(segments, request.max_frames)
        return StreamJob(request_id=uuid.uuid4().hex, segments=tuple(segments), sampling=request.sampling,
                         seed=seed, submitted_at=checked.submitted_at,
                         notice=resolved.notice if resolved is not None else None)

    def _voice_language(self, resolved: ResolvedVoice | None) -> str | None:
        if resolved is None or resolved.name is None:
            return None
        preset = self.voices.catalog.find(resolved.name)
        return preset.language if preset is not None else None

    def _voice_clone_segments(self, text: str, resolved: ResolvedVoice) -> list[Segment]:
        chunks = split_text(text, self._count_tokens, max_tokens=self.config.voice_clone_max_text_tokens)
        segments = []
        for index, chunk in enumerate(chunks):
            text_ids = self.tokenizer.encode(chunk)
            rows = build_prompt_rows(self.template, "voice_clone", text_ids, resolved.codes)
            self._check_rows_fit(rows)
            last = index == len(chunks) - 1
            segments.append(Segment(rows=rows, max_frames=default_max_frames(len(text_ids)),
                                    pause_after_s=0.0 if last else pause_after_chunk_s(chunk),
                                    prefix_rows=self._voice_clone_prefix_rows(len(resolved.codes)),
                                    text=chunk, estimated_frames=estimate_frames(len(text_ids))))
        return segments

    def _continuation_segments(self, text: str, voice: Voice | None,
                               resolved: ResolvedVoice | None) -> list[Segment]:
        if voice is None or resolved is None:
            text_ids = self.tokenizer.encode(text)
            rows = build_prompt_rows(self.template, "continuation", text_ids, None)
            self._check_rows_fit(rows)
            return [Segment(rows=rows, max_frames=default_max_frames(len(text_ids)),
                            prefix_rows=self._continuation_prefix_rows(), text=text,
                            estimated_frames=estimate_frames(len(text_ids)))]
        transcript = voice.transcript or resolved.transcript
        if not transcript:
            raise InvalidRequestError(
                "continuation mode with a reference voice needs the reference clip's transcript: "
                "pass ref_text (or use mode 'voice_clone', which needs no transcript)",
                param="ref_text",
            )
        # docs/spec/LM.md §4.4: the transcript and the new text are joined as one string, encoded once.
        text_ids = self.tokenizer.encode(transcript + text)
        rows = build_prompt_rows(self.template, "continuation", text_ids, resolved.codes)
        self._check_rows_fit(rows)
        new_tokens = max(1, len(text_ids) - self._count_tokens(transcript))
        return [Segment(rows=rows, max_frames=default_max_frames(new_tokens), prime_codes=resolved.codes,
                        prefix_rows=self._continuation_prefix_rows(), text=text,
                        estimated_frames=estimate_frames(new_tokens))]

    def _voice_clone_prefix_rows(self, num_reference_frames: int) -> int:
        """Rows before the text in a voice-clone prompt (docs/spec/LM.md §4.3): user prefix, audio start,
        the reference frames, audio end, and the instruction block."""
        t = self.template
        return len(t.user_prefix) + 1 + num_reference_frames + 1 + len(t.after_reference)

    def _continuation_prefix_rows(self) -> int:
        """Rows before the text in a continuation prompt (docs/spec/LM.md §4.4)."""
        t = self.template
        return len(t.user_prefix) + len(t.no_reference) + len(t.after_reference)

    def _check_rows_fit(self, rows: np.ndarray) -> None:
        limit = self.config.max_context_rows - _MIN_GENERATION_ROWS
        if rows.shape[0] > limit:
            raise InvalidRequestError(
                f"the prompt is {rows.shape[0]} rows but at most {limit} fit: use a shorter reference clip "
                "or shorter text (voice_clone mode splits long text automatically)",
                param="input",
            )

    @staticmethod
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

    # ---- service -------------------------------------------------------------------------------

    def warmup(self) -> None:
        """One short greedy request through the whole path (LM, codec, engine)."""
        request = SynthesisRequest(text="Hello.", mode="continuation", sampling=SamplingParams.greedy(), seed=0,
                                   max_frames=4,
                                   normalize_text=False)
        try:
            self.synthesize(request)
        except TTSError as exc:
            logger.warning("warm-up skipped: %s", exc.message)
            return
        self.warm = True

    def warm_voices(self) -> int:
        """Resolve every available preset (encoding its clip once, cached on disk) and have the
        engine precompute each voice's prompt-prefix KV (CPU path; a no-op where prefill is cheap).
        Returns the number of prefixes queued."""
        rows = build_prompt_rows(self.template, "continuation", self.tokenizer.encode("."), None)
        self.engine.warm_prefix(rows[: self._continuation_prefix_rows()])
        count = 1
        for preset in self.voices.list_presets():
            if not preset.available:
                continue
            try:
                resolved = self.voices.resolve(Voice.preset(preset.name))
            except TTSError as exc:
                logger.info("voice %s not warmed: %s", preset.name, exc.message)
                continue
            rows = build_prompt_rows(self.template, "voice_clone", self.tokenizer.encode("."), resolved.codes)
            self.engine.warm_prefix(rows[: self._voice_clone_prefix_rows(len(resolved.codes))])
            count += 1
        logger.info("queued %d voice prefixes for precomputation", count)
        return count

    def stats(self) -> dict:
        return self.engine.stats()

    def features(self) -> list[EngineFeatures]:
        """What each engine runs (one per device; see `engine/features.py`)."""
        features = self.engine.features()
        return features if isinstance(features, list) else [features]

    def health(self) -> dict:
        return {**self.info, "warm": self.warm, **self.engine.stats(),
                "engine_features": [f.as_dict() for f in self.features()]}

    def close(self) -> None:
        if self._preparer is not None:
            self._preparer.close()
        self.engine.close()
