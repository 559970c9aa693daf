"""The text-in core's pure parts: where a growing text may be cut (`speaking.cutting`), estimated word
times (`speaking.words`), faded piece edges (`speaking.joins`) and G.711 companding (`audio.g711`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts_core.audio.encoders import StreamEncoder
from tts_core.audio.g711 import alaw_bytes, mulaw_bytes
from tts_core.speaking.cutting import TextBuffer, boundaries
from tts_core.speaking.joins import RAMP_SAMPLES, PieceEdges
from tts_core.speaking.words import estimate_word_times, split_words


def _ends(text: str) -> list[str]:
    return [text[:end] for end, _ in boundaries(text)]


def test_boundaries_after_sentence_and_clause_marks_with_their_closers():
    text = 'He said "stop!" then, after a while: ok. 你好，世界。'
    assert _ends(text) == ['He said "stop!"', 'He said "stop!" then,', 'He said "stop!" then, after a while:',
                           'He said "stop!" then, after a while: ok.', text[:-3], text]
    assert [kind for _, kind in boundaries("One, two. ")] == ["clause", "sentence"]


@pytest.mark.parametrize("text", ["It costs 3.5 dollars", "1,000 people", "at 10:30", "Mr. Smith", "J. K. Rowling",
                                  "e.g. this", "It is 3.", "Call Dr."])
def test_no_boundary_inside_numbers_abbreviations_or_initials(text):
    assert boundaries(text) == []


def test_a_mark_ending_the_buffer_counts_at_once_unless_a_digit_could_follow():
    assert _ends("Hello there,") == ["Hello there,"]
    assert _ends("Really?") == ["Really?"]
    assert _ends("It was 3,") == []  # "3,000" may follow


def test_the_buffer_hands_out_everything_up_to_its_last_boundary():
    buffer = TextBuffer(max_delay_s=3.0, max_piece_chars=1000)
    taken = []
    for token in ["Hello", " there", ",", " how", " are you? I", " am"]:
        buffer.push(token, now=0.0)
        cut = buffer.take(0.0)
        taken.append(None if cut is None else (cut.text, cut.reason))
    assert taken == [None, None, ("Hello there,", "clause"), None, (" how are you?", "sentence"), None]
    assert buffer.text == " I am"
    assert buffer.take(2.9) is None  # waits for a boundary within its delay
    assert buffer.take(3.0).text == " I"  # then goes at the last word boundary
    assert buffer.take(3.0, force=True).text == " am"


def test_zero_delay_speaks_each_push_as_it_is():
    buffer = TextBuffer(max_delay_s=0.0, max_piece_chars=1000)
    buffer.push("a sentence without end ", now=5.0)
    cut = buffer.take(5.0)
    assert (cut.text, cut.reason) == ("a sentence without end ", "deadline")
    assert buffer.take(5.0) is None


def test_whitespace_alone_is_never_a_piece():
    buffer = TextBuffer(max_delay_s=0.0, max_piece_chars=1000)
    buffer.push("   ", now=0.0)
    assert buffer.take(10.0) is None
    assert buffer.take(10.0, force=True) is None
    buffer.push("go", now=11.0)
    assert buffer.take(11.0).text == "   go"


def test_a_long_text_is_cut_within_the_piece_limit_at_a_boundary():
    buffer = TextBuffer(max_delay_s=3.0, max_piece_chars=30)
    buffer.push("One two three, four five six seven eight nine ten eleven", now=0.0)
    assert buffer.take(0.0).text == "One two three,"
    cut = buffer.take(0.0, force=True)
    assert len(cut.text) <= 30 and cut.text.endswith("eight")  # the last word boundary within the limit


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab ,.?3", max_size=12), max_size=20), st.integers(1, 40),
       st.lists(st.booleans(), min_size=20, max_size=20))
def test_taken_text_concatenates_to_the_pushed_text(pieces, max_chars, forces):
    buffer = TextBuffer(max_delay_s=1.0, max_piece_chars=max_chars)
    taken, now = [], 0.0
    for piece, force in zip(pieces, forces):
        buffer.push(piece, now)
        now += 0.4
        while (cut := buffer.take(now, force=force)) is not None:
            assert len(cut.text.lstrip()) <= max_chars and cut.text.strip()  # leading spaces uncounted
            taken.append(cut.text)
    while (cut := buffer.take(now, force=True)) is not None:
        taken.append(cut.text)
    assert "".join(taken) + buffer.text == "".join(pieces)
    assert not buffer.text.strip()


def test_words_keep_the_text_as_sent_and_fill_the_span_in_order():
    words = estimate_word_times("Hello there, how are you?", 1.0, 3.0)
    assert [w.word for w in words] == ["Hello", "there,", "how", "are", "you?"]
    assert words[0].start == 1.0 and words[-1].end == 3.0
    assert all(a.end == b.start for a, b in itertools.pairwise(words))
    assert words[0].end - words[0].start > words[2].end - words[2].start  # "Hello" longer than "how"
    assert split_words("你好，世界。 ok") == ["你", "好，", "世", "界。", "ok"]
    assert estimate_word_times("  ", 0.0, 1.0) == []


def test_piece_edges_fade_only_the_edges_and_lose_no_sample():
    rng = np.random.default_rng(0)
    edges, out, pieces = PieceEdges(), [], []
    for length in (1000, 37, 3000):
        pcm = rng.uniform(-1, 1, (2, length)).astype(np.float32)
        pieces.append(pcm)
        edges.start()
        for block in np.array_split(pcm, 5, axis=1):
            out.append(edges.push(block))
        out.append(edges.end())
    joined, original = np.concatenate(out, axis=1), np.concatenate(pieces, axis=1)
    assert joined.shape == original.shape
    first = pieces[0]
    np.testing.assert_array_equal(joined[:, RAMP_SAMPLES:1000 - RAMP_SAMPLES], first[:, RAMP_SAMPLES:-RAMP_SAMPLES])
    for end in (1000, 1037, 4037):  # each piece starts and ends near silence
        assert np.abs(joined[:, end - 1]).max() < 0.001 and np.abs(joined[:, end - RAMP_SAMPLES - 1]).max() <= 1.0
    assert np.abs(joined[:, 0]).max() < 0.001 and np.abs(joined[:, 1000]).max() < 0.001


def test_g711_matches_the_reference_encoder_on_every_sample():
    audioop = pytest.importorskip("audioop")  # the reference (Python <= 3.12)
    every = np.arange(-32768, 32768, dtype=np.int16)
    raw = every.astype("<i2").tobytes()
    assert mulaw_bytes(every) == audioop.lin2ulaw(raw, 2)
    assert alaw_bytes(every) == audioop.lin2alaw(raw, 2)


@pytest.mark.parametrize("fmt, silence", [("mulaw", 0xFF), ("alaw", 0xD5)])
def test_stream_encoder_sends_one_g711_byte_per_sample(fmt, silence):
    encoder = StreamEncoder(fmt, 8000, 1)
    data = encoder.encode(np.zeros((1, 160), np.float32)) + encoder.finish()
    assert data == bytes([silence]) * 160


def test_a_mark_ends_a_piece_where_it_came_whatever_follows():
    buffer = TextBuffer(max_delay_s=3.0, max_piece_chars=1000)
    buffer.push("No boundary here", now=0.0)
    buffer.mark(1)
    buffer.push(" and more. Then", now=0.0)
    first = buffer.take(0.0)
    assert (first.text, first.reason, first.marks) == ("No boundary here", "forced", (1,))
    assert buffer.take(0.0).text == " and more."
    buffer.mark(2)  # a flush with only " Then" before it
    assert buffer.take(0.0).marks == (2,)
    buffer.mark(3)  # nothing before it: a cut with no text
    empty = buffer.take(0.0)
    assert (empty.text, empty.reason, empty.marks) == ("", "mark", (3,))
    assert buffer.take(0.0) is None and buffer.text == ""
