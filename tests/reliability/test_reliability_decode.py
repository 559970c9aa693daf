"""Decode amplification (issue 14, finding 4): a small compressed clip must not become hundreds of
MiB of decoded audio, nor run outside the queue limit. Implausible headers are refused before one
sample is decoded; the worst accepted clip is decoded only as far as the voice bank uses it
(trimmed before resampling); decoding runs in a bounded pool whose waiting clips count against
the engine's queue limit. Memory is measured with tracemalloc (numpy reports its buffers to it).
"""

from __future__ import annotations

import asyncio
import io
import tracemalloc

import numpy as np
import pytest
import soundfile as sf
from support.reliability_common import b64, error_of, run_coro

from studio.limits.clip_decode import ClipDecoder, check_clip, decode_clip
from studio.settings import ServerSettings
from tts_core.engine.types import EngineStats
from tts_core.errors import InvalidRequestError, QueueFullError

pytestmark = pytest.mark.slow

SECONDS = 59.0


def _flac(rate: int, seconds: float, *, amplitude: float = 0.01, channels: int = 2) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    tone = (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    out = io.BytesIO()
    sf.write(out, np.stack([tone] * channels, axis=1), rate, format="FLAC")
    return out.getvalue()


def _peak_mib(fn, *args) -> tuple[float, object]:
    tracemalloc.start()
    try:
        try:
            result = fn(*args)
        except Exception as exc:  # returned, so the peak is read either way
            result = exc
        return tracemalloc.get_traced_memory()[1] / 2**20, result
    finally:
        tracemalloc.stop()


def test_implausible_rates_are_refused_from_the_header(inproc_client, data_dir) -> None:
    """The clip of the finding (59 s of 384 kHz stereo: 45 M samples, ~370 MiB decoded and
    resampled) is refused from its header: nothing is decoded."""
    clip = _flac(384_000, SECONDS, amplitude=0.0)  # silence compresses to a few dozen KiB
    assert len(clip) < 256 * 1024
    peak, result = _peak_mib(decode_clip, clip, ServerSettings())
    assert isinstance(result, InvalidRequestError) and result.code == "bad_sample_rate", result
    assert peak < 1.0, f"{peak:.1f} MiB allocated: the clip was decoded"
    for route, body in (("/v1/audio/speech", {"input": "Hi.", "ref_audio": b64(clip)}),
                        ("/api/tts/stream", {"text": "Hi.", "ref_audio": b64(clip)})):
        r = inproc_client.post(route, json=body)
        assert r.status_code == 400 and error_of(r)["code"] == "bad_sample_rate", r.text[:300]


def test_the_worst_accepted_clip_is_decoded_only_as_far_as_it_is_used() -> None:
    """59 s of 192 kHz stereo (the most the default settings accept) is decoded to its first
    20.5 s, trimmed before resampling: far less memory than decoding it whole would take."""
    settings = ServerSettings(max_upload_bytes=8 * 2**20)
    clip = _flac(192_000, SECONDS)
    whole_mib = SECONDS * 192_000 * 2 * 4 / 2**20  # float32, before any resampling copy
    peak, decoded = _peak_mib(decode_clip, clip, settings, 20.5)
    assert not isinstance(decoded, Exception), decoded
    assert decoded.info.sample_rate == 192_000 and abs(decoded.info.seconds - SECONDS) < 0.1
    assert peak < whole_mib / 2, f"peak {peak:.1f} MiB vs {whole_mib:.1f} MiB decoded whole"
    wav, rate = sf.read(io.BytesIO(decoded.wav), dtype="float32", always_2d=True)
    assert rate == 48_000 and wav.shape == (int(20.5 * 48_000), 2) and abs(decoded.kept_s - 20.5) < 1e-6
    assert check_clip(clip, settings).frames == decoded.info.frames  # counted the same way


def test_a_clip_within_the_kept_length_gives_the_voice_it_gave_before(inproc, clip_wav) -> None:
    """For clips the bank uses whole, the 48 kHz audio handed on is the one it would have made
    itself, and the pool's voice (encoded there) has the codes the engine made from the raw clip."""
    from tts_core.audio.io import load_audio, to_codec_input
    from tts_core.types import Voice, VoiceKind

    decoded = decode_clip(clip_wav, ServerSettings())
    wav, rate = sf.read(io.BytesIO(decoded.wav), dtype="float32", always_2d=True)
    expected = to_codec_input(*load_audio(clip_wav))
    assert rate == 48_000 and np.array_equal(wav.T, expected)
    voice = run_coro(ClipDecoder(workers=1).voice(clip_wav, ServerSettings(), synth=inproc.synth, transcript="Hi."))
    assert voice.kind is VoiceKind.CODES and voice.transcript == "Hi."
    assert np.array_equal(voice.codes, inproc.synth.voices.resolve(Voice.from_audio(clip_wav)).codes)


def test_decoding_is_bounded_and_counted_in_the_queue_limit(inproc) -> None:
    """16 clips at once (finding 4: 6.1 GB at peak, outside the queue limit): at most `workers`
    decode at a time, and clips beyond what the engine still admits (free slots + queue) are
    refused with 503 queue_full before they are decoded."""
    settings = ServerSettings(max_upload_bytes=8 * 2**20)
    clip = _flac(192_000, 20.0)
    stats = inproc.synth.stats()
    admitted = stats.max_active_streams - stats.active_streams + stats.max_queue - stats.queued
    decoder = ClipDecoder(workers=2)

    async def one() -> str:
        try:
            await decoder.decode(clip, settings, synth=inproc.synth)
        except QueueFullError as exc:
            assert exc.retry_after_s and "try again" in exc.message
            return "refused"
        return "decoded"

    async def sixteen() -> list[str]:
        return await asyncio.gather(*(one() for _ in range(16)))

    outcomes = run_coro(sixteen())
    assert outcomes.count("decoded") == admitted and outcomes.count("refused") == 16 - admitted, outcomes
    assert decoder.peak_running == 2 and decoder.pending == 0 and decoder.running == 0


def test_admission_counts_the_engine_queue() -> None:
    decoder = ClipDecoder(workers=1)
    counts = dict(max_active_streams=4, max_queue=12, submitted=0, finished=0, cancelled=0, refused=0, stalled=False)
    idle = EngineStats(active_streams=0, queued=0, **counts)
    full = EngineStats(active_streams=4, queued=12, **counts)
    assert decoder.admits(idle) and decoder.admits(None) and not decoder.admits(full)
    decoder.pending = 15
    assert decoder.admits(idle)
    decoder.pending = 16
    assert not decoder.admits(idle)
