"""tts_core/cancel.py: a CancelToken ends a stream whose reader is blocked on its outbox, without
the reader polling the flag: a queued request is cancelled and leaves the queue, a running one
frees its slot. The tiny checkpoints through the public Synthesizer API; nothing is timed (the
joins' timeouts only keep a broken build from hanging the suite)."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest
from support.server_helpers import wait_for_idle

from tts_core import EngineConfig, SynthesisRequest, Synthesizer, Voice
from tts_core.cancel import CancelToken


@pytest.fixture(scope="module")
def synth(data_dir, tmp_path_factory):
    parity = data_dir / "parity"
    s = Synthesizer.from_pretrained(
        str(parity / "tiny_lm"), str(parity / "tiny_codec"),
        tokenizer=str(data_dir / "hf_checkpoint_meta" / "tokenizer.model"),
        voices_dir=data_dir / "presets", cache_dir=tmp_path_factory.mktemp("cache"), allow_download=False,
        engine_config=EngineConfig(max_active_streams=1, max_queue=2), warmup=False,
    )
    yield s
    s.close()


@pytest.fixture(scope="module")
def voice(data_dir) -> Voice:
    return Voice.from_codes(np.load(data_dir / "codec" / "zh_1.prompt_codes.npy"))


def test_the_token_puts_the_end_marker_into_every_registered_queue_once() -> None:
    token, early, late = CancelToken(), queue.SimpleQueue(), queue.SimpleQueue()
    token.wake_on_set(early)
    assert early.empty() and not token.is_set()
    token.set()
    token.set()
    token.wake_on_set(late)  # registered after the cancel: woken at once
    assert token.is_set() and early.get_nowait() is None and early.empty() and late.get_nowait() is None


def _read_in_thread(stream) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.extend(stream), daemon=True)
    thread.start()
    return thread, got


def test_a_queued_request_ends_when_its_token_is_set(synth, voice) -> None:
    wait_for_idle(lambda: synth.stats().as_dict(), 30)
    before = synth.stats()
    busy = synth.stream(SynthesisRequest(text="The only slot is taken by this long request.", voice=voice, seed=1,
                                         max_frames=300))
    next(busy)  # holds the one slot
    token = CancelToken()
    reader, got = _read_in_thread(synth.stream(SynthesisRequest(text="Waiting in the queue.", voice=voice, seed=2,
                                                                max_frames=5), cancel=token))
    while synth.stats().queued == 0:
        assert reader.is_alive()
        threading.Event().wait(0.01)
    token.set()
    reader.join(30)
    assert not reader.is_alive() and got == []  # it ended without a chunk, while still queued
    busy.close()
    after = wait_for_idle(lambda: synth.stats().as_dict(), 30)
    assert after["cancelled"] == before.cancelled + 2


def test_a_running_stream_ends_and_frees_its_slot_when_its_token_is_set(synth, voice) -> None:
    wait_for_idle(lambda: synth.stats().as_dict(), 30)
    token = CancelToken()
    stream = synth.stream(SynthesisRequest(text="A long request, cancelled from another thread.", voice=voice, seed=3,
                                           max_frames=300), cancel=token)
    first = next(stream)
    assert first.pcm.shape[1] > 0 and synth.stats().active_streams == 1
    token.set()
    rest = list(stream)  # ends: at most the chunks already in its outbox, then the end marker
    assert all(not chunk.is_last for chunk in rest)
    wait_for_idle(lambda: synth.stats().as_dict(), 30)
