"""ZeroGPU mode, web side: the server process stays on the CPU, the page's audio comes from GPU calls.

`ZeroGPUMode` owns the decorated generator (`worker.make_gpu_stream`) and the GPU copy of the
weights, placed "on cuda" in the main thread before serving. A Generate click is a Gradio event (so
the visitor's quota is charged) whose generator `PageRelay.relay` prepares each request on the CPU,
calls the GPU generator and turns every chunk into one relay message (docs/PROTOCOL.md §5) for the
page's hidden component. The API routes keep the server's CPU engine (docs/DEPLOY.md, "ZeroGPU mode").
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from tts_core.audio.encoders import StreamEncoder
from tts_core.engine.stream import Stream, new_stream_id
from tts_core.env import env_flag, env_str
from tts_core.errors import TTSError
from tts_core.types import NUM_CHANNELS, SAMPLE_RATE_HZ, AudioChunk

from ..api.requests import STREAM, StreamBody, UploadStore, prepare, stream_fields
from ..delivery.streaming import f32_bytes
from ..delivery.transports import OPUS_BIT_RATE
from ..errors import scrub_paths
from ..service import SynthesizerService
from ..settings import ServerSettings
from .quota import Visitor, current_visitor

logger = logging.getLogger(__name__)


class ZeroGPUMode:
    """The decorated GPU generator (made at start-up, as `spaces` expects) and its weights; `backend`
    is "spaces" on a ZeroGPU Space, "harness" elsewhere. Make it before the page is built and serving."""

    def __init__(self, *, concurrency: int = 4) -> None:
        from .worker import gpu_decorator, make_gpu_stream  # imports torch (never CUDA)

        self.concurrency = concurrency  # page generations at once, each its own GPU call
        self.gpu, self.backend = gpu_decorator()
        if self.backend == "harness":  # Hugging Face keeps the quota on a Space; the harness here
            from .harness import set_quota
            from .quota import QuotaLedger, parse_policy

            quota = env_str(QUOTA_ENV)
            set_quota(None if quota == "off" else QuotaLedger(parse_policy(quota, QUOTA_ENV)))
        self.weights = None
        self.stream = make_gpu_stream(self._loaded_weights, self.gpu)

    def _loaded_weights(self):
        if self.weights is None:
            raise TTSError("the GPU copy of the model is not loaded yet; try again in a few seconds")
        return self.weights

    def load_weights(self, lm: str, codec: str, *, dtype: str, max_context_rows: int) -> None:
        """Read both checkpoints for the GPU workers and place them "on cuda" (the documented
        module-level placement; `studio.zerogpu.worker.place_weights`). Call it in the main
        thread before serving: `spaces`' CUDA emulation covers that thread only."""
        from .worker import load_gpu_weights, place_weights

        aoti_dir = None
        if env_flag(AOTI_ENV):  # off by default: no AoTI speed measured yet (docs/DEPLOY.md)
            from tts_core.loader import default_cache_dir

            aoti_dir = str(default_cache_dir() / "aoti")
        weights = load_gpu_weights(lm, codec, dtype=dtype, max_context_rows=max_context_rows, aoti_dir=aoti_dir)
        self.weights = place_weights(weights, self.backend)

    def gpu_seconds(self, job) -> int:
        from .worker import gpu_seconds

        return gpu_seconds(job)

    def describe(self) -> str:
        where = "Hugging Face ZeroGPU" if self.backend == "spaces" else "the local ZeroGPU harness"
        return (f"zerogpu ({where}): the page generates in GPU workers, eager; the API and "
                "/api/tts/stream use this process's CPU engine")

    def before_serving(self) -> None:
        """On a ZeroGPU Space: what Gradio's own launch() would have done for `spaces` (this server
        mounts Gradio in FastAPI instead): report the decorated function to ZeroGPU."""
        if self.backend != "spaces":
            return
        import spaces.zero as zero  # present on ZeroGPU (the backend is "spaces" only then)

        startup = getattr(zero, "startup", None)
        if callable(startup):
            startup()
        else:
            logger.warning("spaces.zero has no startup(): ZeroGPU was not told about the GPU function")


def disable_spaces_auto_wrap() -> None:
    """`spaces` can wrap every Gradio event in a GPU call (SPACES_GRADIO_AUTO_WRAP): this page's
    events are CPU work (status polls, input checks) except the one we decorate ourselves."""
    try:
        import spaces
    except ImportError:
        return
    spaces.disable_gradio_auto_wrap()


AOTI_ENV = "MOSS_TTS_ZEROGPU_AOTI"  # 1: the GPU workers run the LM step as AOTInductor packages
QUOTA_ENV = "MOSS_TTS_ZEROGPU_QUOTA"  # the harness's daily quota: "anonymous=120,free=300,pro=2400" or "off"
QUOTA_WORDS = "Your ZeroGPU quota for today is used up"
GPU_WORDS = "No ZeroGPU GPU is available right now"


def unavailable_reason(exc: BaseException) -> str:
    """"quota" for a refusal by quota (the harness's `QuotaExceeded`, `spaces`' Gradio error titled
    "ZeroGPU quota exceeded" / "... credits exceeded"), else "gpu"."""
    title = str(getattr(exc, "title", "") or "")
    return "quota" if "quota" in title.lower() or "credits" in title.lower() else "gpu"


def unavailable_words(exc: BaseException, reason: str) -> str:
    """What the page says: plain words first, then ZeroGPU's own detail (retry time, seconds left)."""
    detail = exc.message if isinstance(exc, TTSError) else str(exc)
    lead = QUOTA_WORDS if reason == "quota" else GPU_WORDS
    return f"{lead}. {scrub_paths(detail)}".strip()


class RelayMessages:
    """Numbers the messages of one relay (one Gradio event), so the page can tell a lost one."""

    def __init__(self) -> None:
        self.relay = new_stream_id()[:12]
        self.count = 0

    def __call__(self, kind: str, request_id: str, **fields) -> str:
        message = {"relay": self.relay, "n": self.count, "type": kind, "requestId": request_id, **fields}
        self.count += 1
        return json.dumps(message, separators=(",", ":"))


class RelayAudio:
    """One item's audio fields: float32 per chunk, or the next bytes of one Ogg/Opus stream."""

    def __init__(self, transport: str):
        self.transport = transport
        self._encoder = (StreamEncoder("opus", SAMPLE_RATE_HZ, NUM_CHANNELS, bit_rate=OPUS_BIT_RATE)
                         if transport == "opus" else None)

    def start_fields(self) -> dict:
        return {"format": "opus", "bitRate": OPUS_BIT_RATE} if self._encoder else {"format": "f32"}

    def fields(self, chunk: AudioChunk) -> dict:
        """The chunk's audio as the player takes it (base64); empty while the encoder holds it."""
        if self._encoder is None:
            return {"pcm": base64.b64encode(f32_bytes(chunk)).decode("ascii")}
        data = self._encoder.encode(chunk.pcm)
        return {"opus": base64.b64encode(data).decode("ascii")} if data else {}

    def finish(self) -> dict:
        if self._encoder is None:
            return {}
        data = self._encoder.finish()
        return {"opus": base64.b64encode(data).decode("ascii")} if data else {}

    def close(self) -> None:
        if self._encoder is not None:
            self._encoder.close()


def run_coroutine(coroutine):
    """Run the request checks (a coroutine) from this synchronous handler: on a loop of its own, in
    another thread when this one already runs a loop (Gradio runs the handler in a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class PageRelay:
    """The page's ZeroGPU event: payload (the JSON `prepare_speak` makes) in, relay messages out."""

    def __init__(self, mode: ZeroGPUMode, service: SynthesizerService, settings: ServerSettings,
                 uploads: UploadStore, *, error_types: tuple[type[BaseException], ...] = (),
                 transport: str = "f32"):
        self.mode = mode
        self.concurrency = mode.concurrency
        self.service = service
        self.settings = settings
        self.uploads = uploads
        self.reraise = error_types  # shown by Gradio too (e.g. ZeroGPU's quota errors, gr.Error)
        if transport not in ("f32", "opus"):
            raise ValueError(f"relay transport must be 'f32' or 'opus', not {transport!r}")
        self.transport = transport  # "opus": every byte passes through Gradio's queue, far fewer than f32's

    def _stream(self, request_body: dict) -> Stream:
        """The item's stream, checked and built here, for a GPU worker to run."""
        synth = self.service.get()
        prepared = run_coroutine(prepare(stream_fields(StreamBody(**request_body)), STREAM, synth=synth,
                                         settings=self.settings, uploads=self.uploads))
        return synth.build(prepared.request)

    def relay(self, payload_json: str | None, visitor: Visitor | None = None) -> Iterator[str]:
        """Every item of the payload, one after another: start, its audio chunks, end (or error);
        the GPU calls are charged to `visitor` (the harness's quota; `spaces` reads the request)."""
        if not payload_json:
            return
        items = json.loads(payload_json).get("items", [])
        message = RelayMessages()
        for index, item in enumerate(items):
            try:
                job = self._stream(item["request"])
            except TTSError as exc:  # the page checked the inputs already; the model may have gone
                yield message("error", new_stream_id(), message=scrub_paths(exc.message))
                return
            request_id = job.id
            audio = RelayAudio(self.transport)
            yield message("start", request_id, label=item.get("label", ""), item=index, items=len(items),
                          sampleRate=SAMPLE_RATE_HZ, channels=NUM_CHANNELS,
                          estimatedDuration=round(job.estimated_audio_s, 3), gpuSeconds=self.mode.gpu_seconds(job),
                          **audio.start_fields())
            last = None
            if visitor is not None:  # read when the GPU call starts, within this step of the generator
                current_visitor.set(visitor)
            try:
                for last in self.mode.stream(job):
                    if last.pcm.shape[1] and (fields := audio.fields(last)):
                        yield message("pcm", request_id, **fields)
                if fields := audio.finish():
                    yield message("pcm", request_id, **fields)
            except GeneratorExit:  # Stop on the page (Gradio cancels the event): the GPU call is stopped
                logger.info("ZeroGPU stream %s stopped by the page", request_id)
                raise
            except Exception as exc:
                logger.warning("ZeroGPU stream %s failed: %s: %s", request_id, type(exc).__name__, exc)
                if last is None:  # refused or failed before any audio: offer the CPU engine instead
                    reason = unavailable_reason(exc)
                    yield message("unavailable", request_id, reason=reason, message=unavailable_words(exc, reason),
                                  item=index, fallback=json.dumps({"items": items[index:]}))
                    return
                text = exc.message if isinstance(exc, TTSError) else f"{type(exc).__name__}: {exc}"
                yield message("error", request_id, message=scrub_paths(text) or "the GPU call failed")
                if isinstance(exc, self.reraise):
                    raise
                return
            finally:
                audio.close()  # a no-op after finish(); releases an encoder cut short
            yield message("end", request_id, **end_fields(last))
            logger.info("ZeroGPU stream %s done: %s", request_id, end_fields(last))


def end_fields(last: AudioChunk | None) -> dict:
    """The end message's figures, from the last chunk's timings (from the request to now)."""
    if last is None:
        return {"audioSeconds": 0.0, "firstAudioMs": None, "elapsedMs": None}
    t = last.timings
    return {"audioSeconds": round(t.audio_s, 3),
            "firstAudioMs": None if t.first_audio_s is None else round(1000 * t.first_audio_s, 1),
            "elapsedMs": round(1000 * t.elapsed_s, 1)}
