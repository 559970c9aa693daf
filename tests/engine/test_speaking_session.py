"""The text-in core on the real engine (tiny checkpoints): a context's pieces as streams, one at a time,
cancel freeing the slot, and a session's context bound."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from support.server_helpers import tiny_synthesizer_factory, wait_for_idle

from tts_core.config import EngineConfig
from tts_core.errors import InvalidRequestError
from tts_core.speaking import SessionLimits, SpeakingSession
from tts_core.types import SynthesisRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def synth(data_dir, tmp_path_factory):
    s = tiny_synthesizer_factory(data_dir, tmp_path_factory.mktemp("cache"),
                                 EngineConfig(max_active_streams=2, max_queue=4))(lambda _line: None)
    yield s
    s.close()


def _starter(synth, started: list[str]):
    base = SynthesisRequest(text="x", voice=synth.default_voice, seed=3, max_frames=6)

    def start(text: str):
        started.append(text)
        return synth.submit(dataclasses.replace(base, text=text))

    return start


def _until_piece_end(context) -> list:
    chunks = []
    for chunk in context:
        chunks.append(chunk)
        if chunk.is_pause or chunk.is_last:
            return chunks
    return chunks


def test_a_context_speaks_its_pieces_in_order_one_stream_at_a_time(synth):
    started: list[str] = []
    session = SpeakingSession()
    context = session.open("c", _starter(synth, started), max_delay_s=3.0)
    context.push("Hello there, how")
    first = _until_piece_end(context)  # the first clause goes at once; the rest waits for a boundary
    context.push(" are you? Fine")
    context.end_input()
    rest = list(context)
    assert started == ["Hello there,", " how are you? Fine"]
    assert [p.reason for p in context.pieces] == ["clause", "forced"]
    chunks = first + rest
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert {c.segment for c in first} == {0} and {c.segment for c in rest if not c.is_last} == {1}
    assert sum(c.is_pause for c in chunks) == 2 and chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
    assert all(c.segment_text == context.pieces[c.segment].text for c in chunks if not c.is_last)
    assert context.streams == 2 and context.ended


def test_cancel_ends_the_reader_and_frees_the_slot(synth):
    started: list[str] = []
    session = SpeakingSession()
    context = session.open("c", _starter(synth, started))
    context.push("This is a sentence that takes a while to say.")
    chunks = iter(context)
    next(chunks)
    assert synth.stats().active_streams == 1
    reader_done = threading.Event()

    def read_rest():
        list(chunks)
        reader_done.set()

    reader = threading.Thread(target=read_rest)
    reader.start()
    assert session.cancel("c") and session.was_cancelled("c")
    reader.join(30)
    assert reader_done.is_set() and context.cancelled
    assert wait_for_idle(lambda: synth.stats().as_dict(), 30)["active_streams"] == 0
    with pytest.raises(InvalidRequestError):
        context.push("more")


def test_at_the_context_bound_the_oldest_waiting_context_makes_room(synth):
    started: list[str] = []
    session = SpeakingSession(SessionLimits(max_contexts=2))
    first = session.open("a", _starter(synth, started))
    second = session.open("b", _starter(synth, started))
    for context in (first, second):
        context.push("Hi.")
        _until_piece_end(context)  # spoken; now waiting for more text (as LiveKit leaves an interrupted one)
    third = session.open("c", _starter(synth, started))
    assert session.get("a") is None and session.get("b") is second and session.get("c") is third
    assert next(first).is_last  # the oldest one finished
    fourth = session.open("d", _starter(synth, started))  # then "b", the oldest that waits
    assert session.get("b") is None and next(second).is_last
    with pytest.raises(InvalidRequestError, match="contexts are open"):
        session.open("e", _starter(synth, started))  # "c" and "d" have not spoken: neither is ended
    session.close()
    assert third.cancelled and fourth.cancelled
