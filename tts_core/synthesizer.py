"""The public API: `Synthesizer.from_pretrained(...)`, then `submit(request) -> Stream`,
`stream(request)` (its chunks) or `synthesize(request)` (the whole result).

The caller's thread checks the request and resolves its voice (which may encode a clip); the
engine thread builds the stream's segments (`segments.build_segments`), generates frames and
decodes them into 48 kHz stereo chunks. Closing or cancelling a stream frees its slot at once.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from .config import EngineConfig, LoadConfig, SamplingParams
from .engine.features import EngineFeatures
from .engine.idle import QUIET_S
from .engine.stream import Stream
from .engine.types import EngineLike, EngineStats
from .errors import InvalidRequestError, TTSError
from .loader import load_parts
from .model.lm_config import LMConfig
from .prompt import PromptTemplate, build_prompt_rows
from .segments import SegmentPlan, build_segments, continuation_prefix_rows, voice_clone_prefix_rows
from .text import check_text
from .tokenizer import TextTokenizer
from .types import (
    NUM_CODEBOOKS,
    SAMPLE_RATE_HZ,
    AudioChunk,
    SynthesisRequest,
    SynthesisResult,
    Timings,
    Voice,
)
from .voices import PresetInfo, VoiceBank

logger = logging.getLogger(__name__)

class Synthesizer:
    """Text in, 48 kHz stereo chunks out. Thread-safe: many `stream()` calls may run at once.

    Build it with `Synthesizer.from_pretrained`; `tts_core.loader` loads its parts.
    """

    sample_rate = SAMPLE_RATE_HZ

    def __init__(self, *, tokenizer: TextTokenizer, engine: EngineLike, voices: VoiceBank,
                 config: EngineConfig, info: dict, lm_config: LMConfig, load: LoadConfig | None = None):
        self.tokenizer = tokenizer
        self.template = PromptTemplate.from_tokenizer(tokenizer, lm_config)
        self.engine = engine
        self.voices = voices
        self.config = config
        self.load = load or LoadConfig()  # what was loaded, as resolved (`loader.load_parts`)
        self.info = dict(info)
        self.warm = False
        # Set once the start-up's background voice warm-up is over (or there is none): work that must
        # not overlap it (the web page's build, studio/page_slot.py) waits for it.
        self.voices_warmed = threading.Event()
        self.plan = SegmentPlan(self.template, tokenizer, config, voices.catalog)

    @classmethod
    def from_pretrained(cls, lm: str | None = None, codec: str | None = None, *, load: LoadConfig | None = None,
                        engine_config: EngineConfig | None = None, warmup: bool = True,
                        report: Callable[[str], None] | None = None, **options: Any) -> Synthesizer:
        """Load the LM and the codec and start the engine: `from_pretrained()` for the official
        checkpoints, `from_pretrained(lm_dir, codec_dir, device="cpu")`, or `from_pretrained(load=...)`.

        Args:
            lm, codec, options: `LoadConfig`'s fields by name (checkpoints, device, dtype, quantize,
                tokenizer, voices_dir, cache_dir, ...), replacing those of `load`.
            load: what to load, and where and how (`config.LoadConfig`; default: its defaults).
            engine_config: slots, queue and text limits (`config.EngineConfig`; its
                `max_active_streams` None follows the device).
            warmup: run a short generation so the first listener does not pay for it.
            report: callback receiving human-readable progress lines.
        """
        report = report or (lambda _line: None)
        given = {name: value for name, value in (("lm", lm), ("codec", codec)) if value is not None}
        load = (load or LoadConfig()).with_options(**given, **options)
        parts = load_parts(load, engine_config or EngineConfig(), report)
        synth = cls(tokenizer=parts.tokenizer, engine=parts.engine, voices=parts.voices, config=parts.engine_config,
                    info=parts.info, lm_config=parts.lm_config, load=parts.load)
        if warmup:
            report("warming up…")
            synth.warmup()
            # Preset voices' prompt prefixes are computed in the background, so each preset's
            # first request is already as fast as its later ones.
            threading.Thread(target=synth._warm_voices_after_start, name="voice-warm", daemon=True).start()
        else:
            synth.voices_warmed.set()
        logger.info("synthesizer ready: %s", json.dumps(synth.info))
        for features in synth.features():
            logger.info("engine on %s", features.summary())
        return synth

    # ---- voices --------------------------------------------------------------------------------

    def list_voices(self) -> list[PresetInfo]:
        return self.voices.list_presets()

    def preset_info(self, name: str) -> PresetInfo | None:
        return self.voices.preset_info(name)

    def voice_clip_path(self, name: str) -> Path | None:
        return self.voices.clip_path(name)

    @property
    def default_voice(self) -> str:
        return self.voices.default_voice

    # ---- synthesis -----------------------------------------------------------------------------

    def submit(self, request: SynthesisRequest, *, stream_id: str | None = None) -> Stream:
        """Start `request`: its `Stream`, an iterator of 48 kHz stereo `AudioChunk`s (the last has
        `is_last=True`). Input errors raise here; a refusal (queue full) or a build error ends the
        stream with that error, raised by its first `next()`. `close()` / `cancel()` (any thread)
        ends it and frees its engine slot at once. Runs the voice's encoding in this thread."""
        stream = self.build(request, stream_id=stream_id, now=False)
        self.engine.submit(stream)
        return stream

    def stream(self, request: SynthesisRequest) -> Iterator[AudioChunk]:
        """`submit(request)`'s chunks; closing (or dropping) the iterator cancels the request."""
        stream = self.submit(request)
        try:
            yield from stream
        finally:
            stream.close()

    def synthesize(self, request: SynthesisRequest) -> SynthesisResult:
        """The whole result at once (same audio as concatenating `stream` chunks)."""
        stream = self.submit(request)
        pcm_parts: list[np.ndarray] = []
        code_parts: list[np.ndarray] = []
        timings = Timings(first_audio_s=None, elapsed_s=0.0, audio_s=0.0)
        try:
            for chunk in stream:
                pcm_parts.append(chunk.pcm)
                if len(chunk.codes):
                    code_parts.append(chunk.codes)
                timings = chunk.timings
        finally:
            stream.close()
        pcm = np.concatenate(pcm_parts, axis=1) if pcm_parts else np.zeros((2, 0), np.float32)
        codes = np.concatenate(code_parts) if code_parts else np.zeros((0, NUM_CODEBOOKS), np.int64)
        return SynthesisResult(pcm=pcm, sample_rate=SAMPLE_RATE_HZ, codes=codes, timings=timings,
                               request_id=stream.id, notice=stream.notice)

    def build(self, request: SynthesisRequest, *, stream_id: str | None = None, now: bool = True) -> Stream:
        """A checked request's `Stream`, not submitted: its text checked and its voice resolved here;
        its segments built here too when `now` (ZeroGPU sends such a stream to a GPU worker),
        else on the engine thread when submitted."""
        submitted_at = time.monotonic()
        if not isinstance(request, SynthesisRequest):
            raise InvalidRequestError("expected a SynthesisRequest", param="request")
        text = check_text(request.text, self.config.max_text_chars)
        voice = request.voice if isinstance(request.voice, Voice) else None
        resolved = None
        if request.mode == "voice_clone" or voice is not None:
            resolved = self.voices.resolve(voice)  # None -> the default preset
        seed = request.seed if request.seed is not None else secrets.randbits(63)
        stream = Stream(sampling=request.sampling, seed=seed, build=partial(build_segments, self.plan, request, text,
                                                                            resolved),
                        notice=resolved.notice if resolved is not None else None, stream_id=stream_id,
                        submitted_at=submitted_at)
        if now:
            stream.build()
        return stream

    # ---- service -------------------------------------------------------------------------------

    def warmup(self) -> None:
        """One short greedy request through the whole path (LM prefill, a frame, the global step
        after it, a codec decode, the engine): the first calls' set-up, which a first listener
        would otherwise wait for. Two frames cover every step; more only lengthen the start."""
        request = SynthesisRequest(text="Hello.", mode="continuation", sampling=SamplingParams.greedy(), seed=0,
                                   max_frames=2,
                                   normalize_text=False)
        try:
            self.synthesize(request)
        except TTSError as exc:
            logger.warning("warm-up skipped: %s", exc.message)
            return
        self.warm = True

    def warm_voices(self, between: Callable[[], bool] | None = None) -> int:
        """Resolve every available preset (encoding its clip once, cached on disk; the default voice
        first, the one a first request most likely asks for) and have the engine precompute each
        voice's prompt-prefix KV (CPU path; a no-op where prefill is cheap). `between` runs before
        each voice after the default; False stops. Returns the number of prefixes queued."""
        rows = build_prompt_rows(self.template, "continuation", self.tokenizer.encode("."), None)
        self.engine.warm_prefix(rows[: continuation_prefix_rows(self.template)])
        count = 1
        for preset in sorted(self.voices.list_presets(), key=lambda p: p.name != self.default_voice):
            if not preset.available:
                continue
            if between is not None and preset.name != self.default_voice and not between():
                break
            try:
                resolved = self.voices.resolve(Voice.preset(preset.name))
            except TTSError as exc:
                logger.info("voice %s not warmed: %s", preset.name, exc.message)
                continue
            rows = build_prompt_rows(self.template, "voice_clone", self.tokenizer.encode("."), resolved.codes)
            self.engine.warm_prefix(rows[: voice_clone_prefix_rows(self.template, len(resolved.codes))])
            count += 1
        logger.info("queued %d voice prefixes for precomputation", count)
        return count

    def _warm_voices_after_start(self) -> None:
        try:
            self.warm_voices(between=self._until_no_stream)
        finally:
            self.voices_warmed.set()

    def _until_no_stream(self) -> bool:
        """Wait until no stream has run for QUIET_S (a clip's encoding takes a core, and a request
        often follows another); False once the engine is closing."""
        return self.engine.idle.wait_quiet(QUIET_S)

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def features(self) -> list[EngineFeatures]:
        """What each engine runs (one per device; see `engine/features.py`)."""
        return self.engine.features()

    def health(self) -> dict:
        return {**self.info, "warm": self.warm, **self.engine.stats().as_dict(),
                "engine_features": [f.as_dict() for f in self.features()],
                "config": {"engine": asdict(self.config), "load": asdict(self.load)}}

    def close(self) -> None:
        self.engine.close()
