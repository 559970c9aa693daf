"""Fuzzing: schemathesis over the OpenAPI schema of the JSON routes, hypothesis over text
normalisation + prompt building (through `Synthesizer.build`), over the `ref_audio` field and over
mutated audio files. Every run is derandomized (the same examples each time), bounded in count,
and talks to 127.0.0.1 only (generated http(s) URLs are replaced before sending).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from support.reliability_common import REPO_ROOT, run_coro, wav_bytes

from studio.errors import http_status
from studio.limits.ref_audio import ClipInfo, check_clip, read_ref_audio
from studio.settings import ServerSettings
from tts_core.audio.io import load_audio
from tts_core.errors import InvalidRequestError, TTSError
from tts_core.model.lm_config import LMConfig
from tts_core.types import SynthesisRequest, Voice

pytestmark = pytest.mark.slow

FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))
FORBIDDEN = ("Traceback", 'File "', "site-packages", "/work/", str(REPO_ROOT))
# (path, method, positive examples, negative examples): the JSON routes of the app.
JSON_ROUTES = [
    ("/v1/audio/speech", "POST", 60, 60),
    ("/api/tts/stream", "POST", 60, 60),
    ("/v1/models/{model_id}", "GET", 15, 0),  # any string is a valid id: no negative cases
    ("/api/voices/{name}/clip", "GET", 15, 0),
    ("/v1/voices", "GET", 3, 0),
    ("/v1/models", "GET", 3, 0),
    ("/api/voices", "GET", 3, 0),
    ("/health", "GET", 3, 0),
]
AUDIO_TYPES = ("audio/", "application/octet-stream")


# ---- schemathesis ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api_schema(inproc_client):
    return schemathesis.openapi.from_dict(inproc_client.get("/openapi.json").json())


# Fields that make most generated bodies fail early (unknown voice or model, speed != 1): dropped
# from every other positive body, so that random sampling fields and formats reach the engine too.
_NOISY_FIELDS = ("voice", "model", "speed", "ref_audio", "ref_text", "ref_audio_id", "mode", "stream_format")


def _bound(case, mode: GenerationMode) -> None:
    """Keep generated synthesis short and local: at most 2 frames, no real URL in ref_audio."""
    body = case.body
    if not isinstance(body, dict):
        return
    if mode == GenerationMode.POSITIVE and len(repr(body)) % 2:
        for name in _NOISY_FIELDS:
            body.pop(name, None)
    frames = body.get("max_frames")
    if frames is None or (isinstance(frames, int) and not isinstance(frames, bool) and frames > 2):
        body["max_frames"] = 2
    ref = body.get("ref_audio")
    if isinstance(ref, str) and ref.strip()[:8].lower().startswith(("http://", "https://")):
        body["ref_audio"] = "http://127.0.0.1:9/nothing.wav"  # loopback, and refused anyway


def _check(response, path: str, data_dir: Path) -> None:
    status = response.status_code
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    assert status < 500 or status == 503, (path, status, response.content[:300])
    if status == 503:
        assert response.headers.get("retry-after"), (path, response.headers)
    if status >= 400:
        assert content_type.startswith("application/json"), (path, status, content_type)
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"] and error["type"], error
    elif path.startswith(("/v1/audio", "/api/tts")):
        assert content_type.startswith(AUDIO_TYPES), (path, content_type)
    if not content_type.startswith(AUDIO_TYPES):
        text = response.content.decode("utf-8", "replace")
        for needle in (*FORBIDDEN, str(data_dir)):
            assert needle not in text, (path, needle, text[:300])


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("path", "method", "positive", "negative"), JSON_ROUTES,
                         ids=[f"{m} {p}" for p, m, _, _ in JSON_ROUTES])
def test_schemathesis(api_schema, inproc, inproc_client, data_dir, figures, path, method, positive, negative) -> None:
    """Valid and invalid requests generated from the schema: never a 5xx (except 503 +
    Retry-After), errors always in the JSON error shape, no trace or path in any answer."""
    operation = api_schema[path][method]
    statuses: Counter = Counter()

    def fuzz(mode: GenerationMode, count: int) -> None:
        @settings(FUZZ, max_examples=count, phases=[Phase.explicit, Phase.generate])
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case) -> None:
            _bound(case, mode)
            response = case.call(base_url=inproc.url, timeout=60)
            statuses[response.status_code] += 1
            _check(response, path, data_dir)

        run()

    if positive:
        fuzz(GenerationMode.POSITIVE, positive)
    if negative:
        fuzz(GenerationMode.NEGATIVE, negative)
    health = inproc_client.get("/health").json()
    assert health["status"] == "ready"
    fuzz = figures.setdefault("schemathesis", {})
    fuzz[f"{method} {path}"] = dict(sorted((str(k), v) for k, v in statuses.items()))


# ---- text normalisation + prompt building ---------------------------------------------------

_MIXED = st.text(st.sampled_from([*"abc XYZ 123 中文字。，！？；;:.,!?\"'”）】」\n-—…_/@#[]{}《》→ひらカナ한국",
                                  "\u200b", "\x00", "\ufeff", "\u202e", "\U0001f600", "\ud800"]), max_size=300)
_ANY = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)


@pytest.fixture(scope="module")
def prompt_limits(inproc, data_dir: Path) -> dict:
    config = LMConfig.from_json(data_dir / "parity" / "tiny_lm" / "config.json")
    synth = inproc.synth
    voices = [p.name for p in synth.list_voices() if p.available]
    return {"config": config, "voices": voices, "max_rows": synth.config.max_context_rows}


@pytest.mark.timeout(240)
def test_prepare_never_crashes_and_rows_are_valid(inproc, prompt_limits, figures) -> None:
    """Any text, either mode, any preset, none, or codes with any transcript, any frame cap:
    `Synthesizer.build` (normalise,
    detect language, split, tokenize, build rows) either refuses with InvalidRequestError naming a
    field, or returns segments whose rows are int64 [T, 17] with every id inside its vocabulary."""
    synth = inproc.synth
    config: LMConfig = prompt_limits["config"]
    sizes = np.asarray(config.audio_codebook_sizes)
    slots = {config.audio_user_slot_id, config.audio_assistant_slot_id}
    outcomes: Counter = Counter()

    # A reference voice given as codes carries a transcript (ref_text), which is not normalised.
    codes = np.zeros((12, config.n_vq), np.int64)
    voices = st.one_of(st.none(), st.sampled_from(prompt_limits["voices"]).map(Voice.preset),
                       st.builds(lambda t: Voice.from_codes(codes, transcript=t), st.one_of(_MIXED, _ANY)))

    @settings(FUZZ, max_examples=200)
    @given(text=st.one_of(_MIXED, _ANY), mode=st.sampled_from(["voice_clone", "continuation"]), voice=voices,
           max_frames=st.one_of(st.none(), st.integers(1, 2000)), normalize=st.booleans())
    def run(text, mode, voice, max_frames, normalize) -> None:
        try:
            request = SynthesisRequest(text=text, voice=voice, mode=mode, max_frames=max_frames,
                                       normalize_text=normalize, seed=1)
            job = synth.build(request)
        except InvalidRequestError as exc:
            assert exc.param and exc.message, exc
            outcomes[f"refused ({exc.param}: {exc.code or 'invalid'})"] += 1
            return
        outcomes["prepared"] += 1
        assert job.segments, text
        total = 0
        for segment in job.segments:
            rows = segment.rows
            assert rows.dtype == np.int64 and rows.ndim == 2 and rows.shape[1] == config.n_vq + 1, rows.shape
            assert 1 <= rows.shape[0] <= prompt_limits["max_rows"] - 32
            tokens, codes = rows[:, 0], rows[:, 1:]
            assert (tokens >= 0).all() and (tokens < config.text_vocab_size).all()
            audio = np.isin(tokens, list(slots))
            assert (codes[~audio] == config.audio_pad_id).all()
            assert ((codes[audio] >= 0) & (codes[audio] < sizes[None, :])).all()
            assert segment.max_frames >= 1 and segment.pause_after_s >= 0
            total += segment.max_frames
        if max_frames is not None:
            assert total <= max_frames

    run()
    assert outcomes["prepared"] > 50, outcomes
    figures["prompt_fuzz"] = dict(outcomes)


# ---- ref_audio strings and audio bytes ------------------------------------------------------


class _OpenWatch:
    """Audit hook (installed once per process) recording every open of the watched paths."""

    watched: ClassVar[set[str]] = set()
    opened: ClassVar[list[str]] = []
    lock = threading.Lock()
    installed = False

    @classmethod
    def install(cls) -> None:
        if not cls.installed:
            sys.addaudithook(cls._hook)
            cls.installed = True

    @classmethod
    def _hook(cls, event: str, args: tuple) -> None:
        if event == "open" and cls.watched and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if os.path.abspath(path) in cls.watched:
                with cls.lock:
                    cls.opened.append(path)


@pytest.mark.timeout(120)
def test_ref_audio_strings_never_open_files(tmp_path, clip_wav) -> None:
    """Arbitrary strings, and every spelling of the path of a real clip on disk: only 400/413,
    and the file is never opened."""
    secret = tmp_path / "secret.wav"
    secret.write_bytes(clip_wav)
    relative = os.path.relpath(secret)
    spellings = [str(secret), f"file://{secret}", f"FILE:{secret}", f" {secret} ", relative, "./" + relative,
                 str(secret).replace("/", "\\"), f"{secret}?x=1", f"{tmp_path}/./secret.wav"]
    settings_ = ServerSettings(max_upload_bytes=64 * 1024)
    _OpenWatch.install()
    _OpenWatch.watched = {str(secret)}
    _OpenWatch.opened.clear()

    @settings(FUZZ, max_examples=200)
    @given(value=st.one_of(st.sampled_from(spellings), st.text(max_size=200),
                           st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_ \n",
                                   max_size=400),
                           st.builds(lambda p, s: p + s, st.sampled_from(["data:", "data:audio/wav;base64,", "DATA:,",
                                                                          "file:", "blob:", "javascript:"]),
                                     st.text(max_size=100))))
    def run(value: str) -> None:
        try:
            run_coro(read_ref_audio(value, settings_))
        except TTSError as exc:
            assert http_status(exc)[0] in (400, 413) and exc.param == "ref_audio", exc
        else:  # a string that happens to decode to a usable clip would be fine; none is expected
            pass

    try:
        run()
    finally:
        _OpenWatch.watched = set()
    assert _OpenWatch.opened == []


@pytest.fixture(scope="module")
def seed_clips() -> list[bytes]:
    rng = np.random.default_rng(1)
    noise = (rng.standard_normal(8000) * 0.2).astype(np.float32)  # 0.5 s at 16 kHz
    clips = [wav_bytes(noise, 16_000), wav_bytes(noise, 16_000, fmt="FLAC"),
             wav_bytes(noise, 16_000, fmt="OGG", subtype="VORBIS"), wav_bytes(noise, 16_000, subtype="FLOAT")]
    with contextlib.suppress(Exception):  # libsndfile without MP3 support
        clips.append(wav_bytes(noise, 16_000, fmt="MP3", subtype="MPEG_LAYER_III"))
    return clips


@pytest.mark.timeout(180)
def test_mutated_audio_is_refused_cleanly(seed_clips, figures) -> None:
    """Valid clips with bytes overwritten, truncated or spliced: `check_clip` accepts or refuses
    with a clear 4xx, and whatever it accepts the decoder reads without an unexpected error."""
    settings_ = ServerSettings(max_upload_bytes=512 * 1024, max_ref_audio_s=30.0)
    outcomes: Counter = Counter()

    @settings(FUZZ, max_examples=250)
    @given(index=st.integers(0, len(seed_clips) - 1),
           edits=st.lists(st.tuples(st.integers(0, 4095), st.binary(min_size=1, max_size=8)), max_size=6),
           cut=st.one_of(st.none(), st.integers(0, 8000)))
    def run(index: int, edits: list, cut: int | None) -> None:
        data = bytearray(seed_clips[index])
        for position, patch in edits:
            position %= len(data)
            data[position : position + len(patch)] = patch
        if cut is not None:
            data = data[: cut % (len(data) + 1)]
        try:
            info = check_clip(bytes(data), settings_)
        except TTSError as exc:
            assert http_status(exc)[0] in (400, 413) and exc.param == "ref_audio", exc
            outcomes[exc.code or "refused"] += 1
            return
        assert isinstance(info, ClipInfo) and info.frames >= 1
        try:
            wav, sample_rate = load_audio(bytes(data))
        except InvalidRequestError:
            outcomes["accepted, then refused by the decoder"] += 1
            return
        assert wav.shape[0] == info.channels and sample_rate == info.sample_rate
        assert wav.shape[1] <= info.frames + 1152  # never more than what was checked (+ one MP3 frame)
        outcomes["accepted"] += 1

    run()
    figures["audio_mutation_fuzz"] = dict(outcomes)
