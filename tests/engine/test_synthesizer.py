"""Integration: the tiny reference checkpoints through the public Synthesizer API."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file
from support.server_helpers import wait_for_idle

from studio.errors import http_status
from tts_core import (
    EngineConfig,
    InvalidRequestError,
    QueueFullError,
    SamplingParams,
    SynthesisRequest,
    Synthesizer,
    Voice,
    VoiceNotFoundError,
)
from tts_core.types import SAMPLES_PER_FRAME

CASE_TEXT = {
    "A_voice_clone_en": "Hello world, this is a parity test for MOSS TTS Nano.",
    "B_voice_clone_zh": "今天天气很好，我们一起去公园散步吧。",
    "D_continuation_text_only": "Good morning! How are you today?",
}
ZH1_TRANSCRIPT = "欢迎关注模思智能、上海创智学院与复旦大学自然语言处理实验室。"


@pytest.fixture(scope="module")
def synth(data_dir, tmp_path_factory):
    parity = data_dir / "parity"
    s = Synthesizer.from_pretrained(
        str(parity / "tiny_lm"), str(parity / "tiny_codec"),
        tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
        voices_dir=data_dir / "presets", cache_dir=tmp_path_factory.mktemp("cache"), allow_download=False,
        engine_config=EngineConfig(max_active_streams=3, max_queue=2),
    )
    yield s
    s.close()


@pytest.fixture(scope="module")
def vectors(parity_dir):
    return load_file(str(parity_dir / "tiny_lm_vectors.safetensors"))


@pytest.fixture(scope="module")
def zh1_codes(data_dir):
    return np.load(data_dir / "codec" / "zh_1.prompt_codes.npy")


def _greedy(text, voice=None, mode="voice_clone", max_frames=12):
    return SynthesisRequest(text=text, voice=voice, mode=mode, sampling=SamplingParams.greedy(), seed=0,
                            max_frames=max_frames, normalize_text=False)


def _wait_idle(synth, timeout_s=10.0):
    return wait_for_idle(lambda: synth.stats().as_dict(), timeout_s)


@pytest.mark.parametrize("case", ["A_voice_clone_en", "B_voice_clone_zh"])
def test_greedy_voice_clone_matches_reference(synth, vectors, zh1_codes, case):
    result = synth.synthesize(_greedy(CASE_TEXT[case], Voice.from_codes(zh1_codes)))
    expected = vectors[f"{case}.greedy.audio_token_ids"].numpy()
    np.testing.assert_array_equal(result.codes, expected)
    # pcm: the offline codec decode of exactly those codes
    with torch.inference_mode():
        offline = synth.engine.runner.codec.decode(torch.as_tensor(expected.T[None]))[0].numpy()
    assert result.pcm.shape == (2, 12 * SAMPLES_PER_FRAME)
    np.testing.assert_allclose(result.pcm, offline, atol=1e-4)


def test_greedy_continuation_with_prompt_matches_reference(synth, vectors, zh1_codes):
    voice = Voice.from_codes(zh1_codes, transcript=ZH1_TRANSCRIPT)
    result = synth.synthesize(_greedy(CASE_TEXT["B_voice_clone_zh"], voice, mode="continuation"))
    np.testing.assert_array_equal(result.codes, vectors["C_continuation_prompted.greedy.audio_token_ids"].numpy())
    # The decoder was primed with the reference codes: the output equals the tail of an offline
    # decode of reference + generated codes (docs/spec/LM.md §4.4).
    both = np.concatenate([zh1_codes, result.codes])
    with torch.inference_mode():
        offline = synth.engine.runner.codec.decode(torch.as_tensor(both.T[None]))[0].numpy()
    np.testing.assert_allclose(result.pcm, offline[:, len(zh1_codes) * SAMPLES_PER_FRAME:], atol=1e-4)


def test_greedy_text_only_continuation_matches_reference(synth, vectors):
    result = synth.synthesize(_greedy(CASE_TEXT["D_continuation_text_only"], mode="continuation"))
    np.testing.assert_array_equal(result.codes, vectors["D_continuation_text_only.greedy.audio_token_ids"].numpy())


def test_stream_chunks_concatenate_to_synthesize(synth, zh1_codes):
    request = SynthesisRequest(text="Streaming and offline give the same audio.", voice=Voice.from_codes(zh1_codes),
                               seed=11, max_frames=20)
    chunks = list(synth.stream(request))
    assert chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert chunks[0].pcm.shape == (2, SAMPLES_PER_FRAME), "first chunk must be a single frame"
    assert all(c.pcm.dtype == np.float32 and c.pcm.shape[0] == 2 for c in chunks)
    streamed = np.concatenate([c.pcm for c in chunks], axis=1)
    codes = np.concatenate([c.codes for c in chunks if len(c.codes)])
    whole = synth.synthesize(request)
    np.testing.assert_array_equal(codes, whole.codes)
    assert streamed.shape == whole.pcm.shape == (2, 20 * SAMPLES_PER_FRAME)
    np.testing.assert_allclose(streamed, whole.pcm, atol=1e-4)
    assert chunks[-1].timings.first_audio_s is not None and chunks[-1].timings.audio_s == pytest.approx(1.6)


def test_seeded_sampling_is_reproducible_and_seed_dependent(synth, zh1_codes):
    voice = Voice.from_codes(zh1_codes)

    def run(seed):
        return synth.synthesize(SynthesisRequest(text="Sampling check.", voice=voice, seed=seed, max_frames=10)).codes

    first = run(5)
    synth.synthesize(SynthesisRequest(text="Something else in between.", voice=voice, seed=9, max_frames=6))
    np.testing.assert_array_equal(first, run(5))
    assert not np.array_equal(first, run(6))


def test_closing_the_iterator_cancels_and_frees_the_slot(synth, zh1_codes):
    _wait_idle(synth)
    before = synth.stats()
    stream = synth.stream(SynthesisRequest(text="A long request that will be cancelled.",
                                           voice=Voice.from_codes(zh1_codes), seed=1, max_frames=300))
    next(stream)
    assert synth.stats().active_streams == 1
    stream.close()
    after = _wait_idle(synth)
    assert after["cancelled"] == before.cancelled + 1


def test_concurrent_streams_are_independent_and_match_solo(synth, zh1_codes):
    voice = Voice.from_codes(zh1_codes)
    requests = [SynthesisRequest(text=f"Concurrent stream number {i}.", voice=voice, seed=100 + i, max_frames=8 + 3 * i)
                for i in range(3)]
    solo = [synth.synthesize(r).codes for r in requests]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def worker(i):
        try:
            results[i] = synth.synthesize(requests[i]).codes
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for i in range(3):
        np.testing.assert_array_equal(results[i], solo[i])


def test_queue_full_is_refused_clearly(synth, zh1_codes):
    _wait_idle(synth)
    voice = Voice.from_codes(zh1_codes)
    holders = [synth.stream(SynthesisRequest(text="hold", voice=voice, seed=i, max_frames=400)) for i in range(5)]
    try:
        for h in holders:  # 3 slots + 2 queued
            threading.Thread(target=lambda h=h: next(h, None), daemon=True).start()
        deadline = time.monotonic() + 10
        while synth.stats().active_streams + synth.stats().queued < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(QueueFullError) as info:
            next(synth.stream(SynthesisRequest(text="one too many", voice=voice, max_frames=4)))
        assert http_status(info.value) == (503, "server_busy") and "busy" in info.value.message
    finally:
        for h in holders:
            with contextlib.suppress(ValueError):  # a generator still running in its thread
                h.close()
    _wait_idle(synth, timeout_s=30)


def test_presets_resolve_from_local_clips(synth):
    names = [p.name for p in synth.list_voices() if p.available]
    assert len(names) >= 10
    result = synth.synthesize(SynthesisRequest(text="Preset check.", voice=names[0], seed=1, max_frames=4))
    assert result.pcm.shape == (2, 4 * SAMPLES_PER_FRAME)


@pytest.mark.parametrize("fmt,rate,channels", [
    ("WAV", 16000, 1), ("FLAC", 24000, 2), ("OGG", 44100, 1), ("WAV", 48000, 2), ("MP3", 44100, 2),
    ("FLAC", 48000, 1),
])
def test_uploads_in_common_formats_clone(synth, data_dir, fmt, rate, channels):
    import soxr

    wav, sr = sf.read(data_dir / "presets" / "en_3.wav", dtype="float32", always_2d=True)
    mono = soxr.resample(wav[: sr * 3, 0], sr, rate)
    data = np.stack([mono] * channels, axis=1) if channels == 2 else mono
    buffer = io.BytesIO()
    sf.write(buffer, data, rate, format=fmt)
    voice = Voice.from_audio(buffer.getvalue())
    result = synth.synthesize(SynthesisRequest(text="Cloned.", voice=voice, seed=3, max_frames=3))
    assert result.pcm.shape == (2, 3 * SAMPLES_PER_FRAME)


def test_long_multi_sentence_text_streams_as_one(synth, zh1_codes, monkeypatch):
    # A small chunk budget makes three sentences three prompts without a minutes-long run.
    monkeypatch.setattr(synth, "plan", replace(synth.plan, config=replace(synth.config, voice_clone_max_text_tokens=8)))
    text = "One two three. Four five six. Seven eight nine."
    request = SynthesisRequest(text=text, voice=Voice.from_codes(zh1_codes), seed=2)
    job = synth.build(request)
    assert len(job.segments) == 3
    assert [s.pause_after_s for s in job.segments] == [0.4, 0.4, 0.0]
    expected_frames = sum(s.max_frames for s in job.segments)  # the tiny LM never stops by itself
    chunks = list(synth.stream(request))
    pauses = [c for c in chunks if c.is_pause]
    assert len(pauses) == 2 and all(np.all(c.pcm == 0) and c.pcm.shape == (2, 19200) for c in pauses)
    assert sum(len(c.codes) for c in chunks) == expected_frames
    assert chunks[-1].is_last and [c.seq for c in chunks] == list(range(len(chunks)))
    total = sum(c.pcm.shape[1] for c in chunks)
    assert total == expected_frames * SAMPLES_PER_FRAME + 2 * 19200


@pytest.mark.parametrize("kwargs,param", [
    ({"text": ""}, "text"),
    ({"text": "   \n\t "}, "text"),
    ({"text": "x" * 5000}, "text"),
    ({"text": "hi", "mode": "sing"}, "mode"),
    ({"text": "hi", "seed": -1}, "seed"),
    ({"text": "hi", "max_frames": 0}, "max_frames"),
])
def test_bad_requests_name_the_field(synth, kwargs, param):
    with pytest.raises(InvalidRequestError) as info:
        next(synth.stream(SynthesisRequest(**kwargs)))
    assert info.value.param == param and info.value.message


def test_unknown_voice_and_continuation_without_transcript(synth, data_dir):
    with pytest.raises(VoiceNotFoundError):
        next(synth.stream(SynthesisRequest(text="hi", voice="no-such-voice")))
    clip = (data_dir / "presets" / "en_3.wav").read_bytes()
    with pytest.raises(InvalidRequestError) as info:
        next(synth.stream(SynthesisRequest(text="hi", voice=Voice.from_audio(clip), mode="continuation")))
    assert info.value.param == "ref_text"


def test_unusual_characters_never_crash(synth, zh1_codes):
    for text in ["🙂🙂🙂 ok", "a\x00b\u200bc", "مرحبا بالعالم", "e\u0301\u0301\u0301", "$$$ 100% ### !!!"]:
        result = synth.synthesize(SynthesisRequest(text=text, voice=Voice.from_codes(zh1_codes), seed=1, max_frames=2))
        assert result.pcm.shape[0] == 2


def test_voice_prefix_kv_is_computed_once_and_reused(synth, vectors, zh1_codes):
    cache = synth.engine.runner.prefix_cache
    request = _greedy(CASE_TEXT["A_voice_clone_en"], Voice.from_codes(zh1_codes))
    segment = synth.build(request).segments[0]
    # The prefix ends exactly where the text starts: the instruction block's last id, then text.
    assert segment.rows[segment.prefix_rows - 1, 0] == synth.template.after_reference[-1]
    assert segment.prefix_rows == 13 + 1 + len(zh1_codes) + 1 + 56
    first = synth.synthesize(request).codes
    hits = cache.hits
    second = synth.synthesize(request).codes
    assert cache.hits == hits + 1
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(second, vectors["A_voice_clone_en.greedy.audio_token_ids"].numpy())


def test_every_available_preset_is_warm_before_its_first_request(synth):
    queued = synth.warm_voices()  # also started in the background by from_pretrained
    available = [p.name for p in synth.list_voices() if p.available]
    assert queued == len(available) + 1  # + the no-voice continuation prefix
    cache = synth.engine.runner.prefix_cache
    # The engine computes queued prefixes at idle moments, in order: once work queued after them
    # has run, they are all in the cache (its size alone also counts earlier requests' prefixes).
    computed = threading.Event()
    synth.engine.when_idle(computed.set)
    assert computed.wait(120)
    assert len(cache) >= queued
    hits = cache.hits
    synth.synthesize(_greedy("Warm voices start fast.", Voice.preset(available[-1]), max_frames=3))
    assert cache.hits == hits + 1  # its prefix came from the warmed cache


def test_chunks_say_which_sentence_they_speak_and_the_expected_length(synth):
    text = "The first sentence is here. And here is the second one, a little longer than the first!"
    request = SynthesisRequest(text=text, voice=synth.default_voice, seed=5, max_frames=40, normalize_text=False)
    job = synth.build(request)
    assert len(job.segments) >= 1 and "".join(s.text for s in job.segments).replace(" ", "") == text.replace(" ", "")
    stream = synth.submit(request)
    chunks = list(stream)
    assert [c.segment for c in chunks] == sorted(c.segment for c in chunks)  # in order, never back
    assert {c.segment_text for c in chunks} <= {s.text for s in job.segments}
    estimate = stream.estimated_audio_s
    assert estimate == pytest.approx(job.estimated_audio_s) and 0 < estimate <= 40 * 0.08 + 2.0
