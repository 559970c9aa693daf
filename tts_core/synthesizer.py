"""The public streaming API: `Synthesizer.from_pretrained(...)`, `stream(request)`, `synthesize(request)`.

Front half (caller's thread): validate and normalise text, resolve the voice to reference codes,
split long text, build prompt rows. Back half: the engine thread generates frames and decodes
them into 48 kHz stereo chunks. Closing the iterator returned by `stream` cancels the request.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from .cancel import CancelToken
from .config import DEFAULT_CODEC_ID, DEFAULT_LM_ID, EngineConfig, SamplingParams
from .cpu_mode import ModeChoice
from .cpu_mode_settle import PendingMode, settle_cpu_mode
from .engine.features import EngineFeatures
from .engine.outbox import handle_chunks
from .engine.types import EngineLike, EngineStats, StreamJob
from .errors import InvalidRequestError, TTSError
from .jobs import CheckedRequest, JobPlan, JobRequest, continuation_prefix_rows, voice_clone_prefix_rows
from .loader import load_parts
from .model.lm_config import LMConfig
from .model.quant import QUANT_MODES
from .prompt import PromptTemplate, build_prompt_rows
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
                 config: EngineConfig, info: dict, lm_config: LMConfig, prepare_on_engine: bool = True):
        self.tokenizer = tokenizer
        self.template = PromptTemplate.from_tokenizer(tokenizer, lm_config)
        self.engine = engine
        self.voices = voices
        self.config = config
        self.info = dict(info)
        self.warm = False
        self._closing = threading.Event()
        # Set once the start-up's background voice warm-up is over (or there is none): work that must
        # not overlap it (the web page's build, web/page_slot.py) waits for it.
        self.voices_warmed = threading.Event()
        self._quiet = (0.0, -1)  # (since when, `submitted` count then): the engine's last quiet stretch
        self.plan = JobPlan(self.template, tokenizer, config, voices.catalog)
        # Jobs are built on the engine's thread (`engine/intake.py`); in the caller's only for an
        # engine without an intake, and with `prepare_on_engine=False` in tests comparing the two.
        self._prepare_on_engine = prepare_on_engine and hasattr(engine, "enqueue")

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
        if not warmup:
            synth.voices_warmed.set()
        if warmup or parts.pending_mode is not None:
            # Preset voices' prompt prefixes are computed in the background, so each preset's
            # first request is already as fast as its later ones; then a CPU precision left to
            # settle by a first start is measured at idle moments (`cpu_mode_settle.py`).
            threading.Thread(target=synth._after_start, args=(warmup, parts.pending_mode), name="voice-warm",
                             daemon=True).start()
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

    def stream(self, request: SynthesisRequest, *, cancel: threading.Event | CancelToken | None = None
               ) -> Iterator[AudioChunk]:
        """Yield audio chunks as they are generated; the last one has `is_last=True`.

        Input errors raise on the first `next()`, before any audio. Closing the iterator (or
        dropping it) cancels the request and frees its engine slot at once. `cancel`, set from
        another thread, does the same even while this iterator is blocked waiting for a chunk
        (e.g. a request still queued when its HTTP client goes away); the iterator then ends. A
        `CancelToken` does so without the reader polling the flag.
        """
        submitted_at = time.monotonic()
        if self._prepare_on_engine:
            handle = self.engine.enqueue(self._job_request(self._check(request, submitted_at)))
        else:
            handle = self.engine.submit(self.prepare(request, submitted_at=submitted_at))
        if isinstance(cancel, CancelToken):  # it wakes the outbox itself: no polling (cancel.py)
            cancel.wake_on_set(handle.outbox)
        yield from handle_chunks(self.engine, handle, lambda: self._next_item(handle, cancel))

    @staticmethod
    def _next_item(handle, cancel: threading.Event | CancelToken | None):
        if cancel is None or isinstance(cancel, CancelToken):
            return None if cancel is not None and cancel.is_set() else handle.outbox.get()
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
        codes = np.concatenate(code_parts) if code_parts else np.zeros((0, NUM_CODEBOOKS), np.int64)
        return SynthesisResult(pcm=pcm, sample_rate=SAMPLE_RATE_HZ, codes=codes, timings=timings,
                               request_id=request_id, notice=notice)

    def prepare(self, request: SynthesisRequest, *, submitted_at: float | None = None) -> StreamJob:
        """Validate and turn a request into prompt segments (pure CPU work, no model calls
        except encoding an uploaded reference clip once)."""
        checked = self._check(request, submitted_at if submitted_at is not None else time.monotonic())
        return self._job_request(checked).build(uuid.uuid4().hex)

    def _job_request(self, checked: CheckedRequest) -> JobRequest:
        return JobRequest(self.plan, checked)

    def _check(self, request: SynthesisRequest, submitted_at: float) -> CheckedRequest:
        """Prepare's first half, in the caller's thread: type and length checks, and the voice (which
        may encode an uploaded clip, model work that mostly runs without the interpreter lock)."""
        if not isinstance(request, SynthesisRequest):
            raise InvalidRequestError("expected a SynthesisRequest", param="request")
        text = check_text(request.text, self.config.max_text_chars)
        voice = request.voice if isinstance(request.voice, Voice) else None
        resolved = None
        if request.mode == "voice_clone" or voice is not None:
            resolved = self.voices.resolve(voice)  # None -> the default preset
        return CheckedRequest(request, text, voice, resolved, submitted_at)

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

    def _after_start(self, warm_voices: bool, pending: PendingMode | None) -> None:
        if warm_voices:
            try:
                self.warm_voices(between=self._until_no_stream)
            finally:
                self.voices_warmed.set()
        if pending is not None:
            settle_cpu_mode(pending, self.engine, stop=self._closing, apply=self._serve_settled)

    def _until_no_stream(self, quiet_s: float = 1.0) -> bool:
        """Wait until the engine has generated nothing for `quiet_s` (a clip's encoding takes a
        core, and a request often follows another); False once the synthesizer is closing."""
        while not self._closing.is_set():
            stats = self.engine.stats()
            since, submitted = self._quiet
            if stats.load or stats.submitted != submitted:
                self._quiet = (time.monotonic(), stats.submitted)
            elif time.monotonic() - since >= quiet_s:
                return True
            self._closing.wait(0.05)
        return False

    def _serve_settled(self, lm, codec, choice: ModeChoice) -> None:
        """The CPU precision settled after start. With models (another mode than the one served),
        the engine switches to them at an idle moment, then the voices' prefixes are computed again."""
        if lm is None:
            self.info.update(precision=choice.reason)
            return
        switched = threading.Event()

        def switch() -> None:  # on the engine thread, with no stream running (errors: logged there)
            try:
                self.engine.runner.replace_models(lm, codec)
                self.info.update(quantize=choice.mode if choice.mode in QUANT_MODES else None,
                                 precision=choice.reason)
            finally:
                switched.set()

        self.engine.when_idle(switch)
        while not switched.wait(0.5):
            if self._closing.is_set():
                return
        if self.engine.runner.lm is lm:
            logger.info("now serving in %s weights (%s)", choice.mode, choice.reason)
            self.warm_voices(between=self._until_no_stream)

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def features(self) -> list[EngineFeatures]:
        """What each engine runs (one per device; see `engine/features.py`)."""
        return self.engine.features()

    def health(self) -> dict:
        return {**self.info, "warm": self.warm, **self.engine.stats().as_dict(),
                "engine_features": [f.as_dict() for f in self.features()]}

    def close(self) -> None:
        self._closing.set()
        self.engine.close()
