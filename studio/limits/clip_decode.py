"""Reference clips -> checked, trimmed 48 kHz audio, decoded in a bounded pool counted in the queue limit.

A tiny compressed file can decode to a large cost, so: the header is checked before one sample is
decoded; the clip is decoded block by block, its first `keep_s` seconds kept and trimmed before
resampling (the rest only counted, where the header does not vouch for the length); the result goes
to the voice bank as 48 kHz stereo float WAV. `ClipDecoder` runs decoding (and the bank's encoding)
in at most `workers` threads, the clips waiting counted as queued requests (docs/RELIABILITY.md).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import threading
import weakref
from dataclasses import dataclass

import anyio
import numpy as np
import soundfile as sf

from tts_core.audio.io import MIN_DURATION_S, sniff_container, to_codec_input
from tts_core.engine.types import EngineStats
from tts_core.errors import InvalidRequestError, PayloadTooLargeError, QueueFullError
from tts_core.types import SAMPLE_RATE_HZ, Voice

from ..settings import ServerSettings

logger = logging.getLogger(__name__)

PARAM = "ref_audio"
BLOCK_FRAMES = 1 << 16
DEFAULT_KEEP_S = 20.5  # the voice bank keeps 20 s; a little more so that it still sees (and says) it trimmed
_UNKNOWN = 2**62  # libsndfile's frame count when a stream does not say its length
# A voice recording is mono or stereo; below 16 kHz the codec lacks the upper band it needs to copy a
# voice (the output is 48 kHz); above 192 kHz no recording needs it, and decoding cost grows with it.
REF_AUDIO_MAX_CHANNELS = 2
REF_AUDIO_MIN_SAMPLE_RATE_HZ = 16_000
REF_AUDIO_MAX_SAMPLE_RATE_HZ = 192_000


@dataclass(frozen=True, slots=True)
class ClipInfo:
    """What the checks found: the container, sample rate, channels and length in frames."""

    container: str
    sample_rate: int
    channels: int
    frames: int

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate


@dataclass(frozen=True, slots=True)
class DecodedClip:
    """A checked clip: its `info`, and `wav`, its first `keep_s` seconds as 48 kHz stereo float WAV bytes."""

    info: ClipInfo
    wav: bytes
    kept_s: float


def bad(message: str, code: str, param: str = PARAM) -> InvalidRequestError:
    return InvalidRequestError(f"{param} {message}", param=param, code=code)


def human_size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def too_large(size: int, limit: int, param: str = PARAM) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"{param} is {human_size(size)}; the limit is {human_size(limit)}: send a shorter "
                                "clip (3-10 s is best)", param=param, code="ref_audio_too_large")


def too_long(limit: float, seconds: float | None = None, param: str = PARAM) -> PayloadTooLargeError:
    shown = f"{seconds:.1f} s" if seconds is not None else f"more than {limit:g} s"
    return PayloadTooLargeError(f"{param} is {shown} long; the limit is {limit:g} s: send a 3-10 s clip",
                                param=param, code="ref_audio_too_long")


def _open(data: bytes, settings: ServerSettings, param: str) -> tuple[sf.SoundFile, str]:
    if len(data) > settings.max_upload_bytes:
        raise too_large(len(data), settings.max_upload_bytes, param)
    if not data:
        raise bad("is empty: send a 3-10 s WAV, FLAC, OGG or MP3 clip", "empty_audio", param)
    container = sniff_container(data)
    if container is None:
        raise bad("is not a supported audio file (expected WAV, FLAC, OGG or MP3 data)", "invalid_audio", param)
    try:
        return sf.SoundFile(io.BytesIO(data)), container
    except Exception:  # libsndfile's messages carry object addresses; ours says what to do
        raise bad(f"looks like {container.upper()} but cannot be decoded (truncated or corrupt): "
                  "send a complete audio file", "invalid_audio", param) from None


def _check_header(handle: sf.SoundFile, settings: ServerSettings, param: str) -> tuple[int, int, int]:
    """(rate, channels, declared frames or 0): refused here when implausible, before any decoding."""
    rate, channels = int(handle.samplerate), int(handle.channels)
    if channels < 1 or channels > REF_AUDIO_MAX_CHANNELS:
        raise bad(f"has {channels} channels; send a mono or stereo recording", "too_many_channels", param)
    low, high = REF_AUDIO_MIN_SAMPLE_RATE_HZ, REF_AUDIO_MAX_SAMPLE_RATE_HZ
    if rate < low:
        raise bad(f"is sampled at {rate} Hz; voice cloning needs {low} Hz or more (the output is 48 kHz): "
                  "send a better recording", "bad_sample_rate", param)
    if rate > high:
        raise bad(f"is sampled at {rate} Hz; a voice recording needs at most {high} Hz: resample it "
                  "(48 kHz is plenty)", "bad_sample_rate", param)
    declared = int(handle.frames)
    declared = declared if 0 < declared < _UNKNOWN else 0
    if declared > int(settings.max_ref_audio_s * rate):
        raise too_long(settings.max_ref_audio_s, declared / rate, param)
    return rate, channels, declared


def _scan(data: bytes, settings: ServerSettings, keep_frames_at, param: str, *,
          trust_header: bool) -> tuple[ClipInfo, np.ndarray]:
    """Decode block by block: keep the first `keep_frames_at(rate)` frames and count the rest up to
    the length limit, unless `trust_header` and the header vouches for the length (WAV sizes; FLAC,
    which libsndfile never decodes past its declared length). Returns the info and the kept
    [n, C] float32 frames."""
    handle, container = _open(data, settings, param)
    with handle:
        rate, channels, declared = _check_header(handle, settings, param)
        max_frames = int(settings.max_ref_audio_s * rate)
        keep_frames = min(keep_frames_at(rate), max_frames)
        vouched = trust_header and declared > 0 and container in ("wav", "flac")
        # Untouched pages of np.empty cost nothing; an estimated length (MP3, OGG) must not cut the clip.
        kept = np.empty((min(keep_frames, declared) if vouched else keep_frames, channels), np.float32)
        frames = 0
        try:
            while frames <= max_frames:
                if frames >= keep_frames and vouched:
                    break
                block = handle.read(min(BLOCK_FRAMES, max_frames + 1 - frames), dtype="float32", always_2d=True)
                if len(block) == 0:
                    break
                if frames < len(kept):
                    take = min(len(block), len(kept) - frames)
                    kept[frames:frames + take] = block[:take]
                frames += len(block)
        except Exception:
            raise bad(f"{container.upper()} data is corrupt part-way through: send a complete audio file",
                      "invalid_audio", param) from None
    if frames > max_frames:
        raise too_long(settings.max_ref_audio_s, None, param)  # counted up to the limit, then stopped
    if frames == 0:
        raise bad("holds no audio samples", "empty_audio", param)
    if frames < MIN_DURATION_S * rate:
        length = f"{frames} sample{'s' if frames > 1 else ''}" if frames < 16 else f"{frames / rate * 1000:.1f} ms"
        raise bad(f"is {length} long; it needs at least {MIN_DURATION_S * 1000:.0f} ms (3-10 s works best)",
                  "audio_too_short", param)
    total = max(frames, declared) if vouched and frames >= keep_frames else frames
    return ClipInfo(container, rate, channels, total), kept[:min(frames, len(kept))]


def check_clip(data: bytes, settings: ServerSettings, param: str = PARAM) -> ClipInfo:
    """Check a clip against the limits, counting every frame, never holding more than one block.
    Raises PayloadTooLargeError (413: too big, too long) or InvalidRequestError (400: anything else
    unusable). Blocking (it decodes): call it from a worker thread in async code."""
    info, _ = _scan(data, settings, lambda rate: 0, param, trust_header=False)
    return info


def decode_clip(data: bytes, settings: ServerSettings, keep_s: float = DEFAULT_KEEP_S,
                param: str = PARAM) -> DecodedClip:
    """`check_clip`'s checks, and the first `keep_s` seconds as 48 kHz stereo float WAV bytes
    (trimmed before resampling). Blocking: run it through `ClipDecoder`."""
    info, kept = _scan(data, settings, lambda rate: max(1, int(keep_s * rate)), param, trust_header=True)
    if not np.isfinite(kept).all():
        raise bad("contains NaN or infinite samples: send a normal recording", "invalid_audio", param)
    wav48 = to_codec_input(kept.T, info.sample_rate)  # [2, m] at 48 kHz
    del kept
    out = io.BytesIO()
    sf.write(out, wav48.T, SAMPLE_RATE_HZ, format="WAV", subtype="FLOAT")
    return DecodedClip(info, out.getvalue(), kept_s=wav48.shape[1] / SAMPLE_RATE_HZ)


class ClipDecoder:
    """Runs `decode_clip` in at most `workers` threads; waiting clips count as queued requests.
    `decode(..., synth=...)` refuses with 503 `queue_full` when they plus the engine's waiting
    requests would exceed what the engine still admits (free slots plus queue limit)."""

    def __init__(self, workers: int | None = None):
        self.workers = workers or min(2, os.cpu_count() or 1)
        # One limiter per event loop (a server has one; tests run several): anyio's limiter belongs to a loop.
        self._limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.pending = 0  # clips accepted and not decoded yet (waiting or decoding); event loop only
        self.running = self.peak_running = 0  # decoding now / at most at once (for tests and figures)
        self._lock = threading.Lock()

    def admits(self, stats: EngineStats | None) -> bool:
        if stats is None:
            return True
        free_slots = max(0, stats.max_active_streams - stats.active_streams)
        return self.pending + stats.queued < free_slots + stats.max_queue

    async def decode(self, data: bytes, settings: ServerSettings, *, synth=None,
                     param: str = PARAM) -> DecodedClip:
        """`decode_clip` in the pool (admission counted against `synth`'s queue, when given)."""
        return await self._run(self._decode, data, settings, synth, param)

    async def voice(self, data: bytes, settings: ServerSettings, *, synth=None, transcript: str | None = None,
                    param: str = PARAM) -> Voice:
        """The voice of a clip: decoded, and with `synth` encoded by its voice bank too, all in the
        pool (the engine then gets codes: no decoding or encoding outside the pool)."""
        return await self._run(self._voice, data, settings, synth, param, transcript)

    async def _run(self, work, data: bytes, settings: ServerSettings, synth, param: str, *extra):
        stats = synth.stats() if synth is not None else None
        if not self.admits(stats):
            raise QueueFullError(f"server busy: {self.pending} reference clips being decoded and "
                                 f"{stats.queued} requests waiting; try again in a few seconds", retry_after_s=2.0)
        keep_s = float(getattr(getattr(synth, "voices", None), "max_clip_s", DEFAULT_KEEP_S - 0.5)) + 0.5
        self.pending += 1
        try:
            loop = asyncio.get_running_loop()
            limiter = self._limiters.get(loop)
            if limiter is None:
                limiter = self._limiters[loop] = anyio.CapacityLimiter(self.workers)
            return await anyio.to_thread.run_sync(work, data, settings, keep_s, param, synth, *extra,
                                                  limiter=limiter)
        finally:
            self.pending -= 1

    def _decode(self, data: bytes, settings: ServerSettings, keep_s: float, param: str, synth=None) -> DecodedClip:
        with self._lock:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
        try:
            return decode_clip(data, settings, keep_s, param)
        finally:
            with self._lock:
                self.running -= 1

    def _voice(self, data: bytes, settings: ServerSettings, keep_s: float, param: str, synth,
               transcript: str | None) -> Voice:
        with self._lock:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
        try:
            voice = Voice.from_audio(decode_clip(data, settings, keep_s, param).wav, transcript=transcript)
            bank = getattr(synth, "voices", None)
            if bank is None:
                return voice
            # The bank reads the 48 kHz WAV, checks it (silence), encodes and caches its codes.
            return Voice.from_codes(bank.resolve(voice).codes, transcript=transcript)
        finally:
            with self._lock:
                self.running -= 1


CLIP_DECODER = ClipDecoder()  # one per process: it bounds this process's CPU and memory for decoding
