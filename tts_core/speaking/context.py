"""`SpeechContext`: one utterance whose text arrives in pieces, spoken as one continuous audio stream.

Text is pushed as it arrives (any thread); the reader (one thread) iterates the utterance's
`AudioChunk`s. Whenever nothing of the utterance is being generated, everything up to the buffer's
last boundary (`cutting.TextBuffer`: clause or sentence mark, a flush, the end of input, or the
buffer's delay) becomes the next piece and goes to the engine as one `Stream` (`start(text)`), so a
context holds at most one engine slot and text that arrived meanwhile rides along in one piece.
The pieces' audio is joined into one utterance: faded edges (`joins.PieceEdges`) and, after a
sentence, the pause `text.chunking` puts between sentences of one request (a shorter one otherwise).

The chunks the reader gets are re-tagged for the utterance: `seq` counts over the whole context,
`segment` is the piece's index and `segment_text` its text as pushed; every piece ends with one
pause chunk (`is_pause=True`, maybe empty) and the utterance with an empty `is_last` chunk, so a
`timeline.CaptionTimeline` over them gives one span per piece. `flush()` returns an id that
ends a piece where it came (`Piece.flush_ids`: the text before it is spoken now, whatever follows);
a flush with nothing buffered makes a piece with no text. `cancel()` (any thread) ends the utterance at once: buffered text is dropped, the piece in the
engine is cancelled (its slot freed) and the reader stops. Like a `Stream`, `close()` cancels it
unless it finished.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..engine.stream import Stream
from ..errors import InvalidRequestError, PayloadTooLargeError
from ..text import is_speakable, pause_after_chunk_s
from ..types import NUM_CHANNELS, SAMPLE_RATE_HZ, AudioChunk, Timings
from .cutting import TextBuffer
from .joins import PieceEdges

logger = logging.getLogger(__name__)

# Between pieces that do not end a sentence: half the shortest pause between sentences. The silence
# also carries a resampling client's last samples of the piece out (soxr holds up to 0.11 s at 8 kHz).
MIN_PAUSE_S = 0.12
_NO_CODES = np.zeros((0, 16), np.int64)


@dataclass(frozen=True, slots=True)
class Piece:
    """A part of the utterance's text spoken by one stream (or none, for a flush with no text).

    Args:
        index: its place in the utterance (0, 1, ...): the `segment` of its chunks.
        text: the text as pushed (whitespace included).
        reason: why it was cut there: sentence, clause, forced (a flush, the end of input), deadline,
            mark (a flush with no text before it).
        flush_ids: flushes done once this piece's audio is out.
    """

    index: int
    text: str
    reason: str
    flush_ids: tuple[int, ...] = ()


class SpeechContext:
    """One utterance, text in and audio out (see the module docstring).

    Args:
        start: submits one piece's text and returns its `Stream` (runs on the reader's thread).
        max_delay_s: how long text waits for a boundary before it is spoken anyway.
        max_piece_chars: the longest text one stream speaks.
        max_buffered_chars: unspoken text the context holds at most; a push beyond it is refused.
        clock: `time.monotonic` (tests pass a fake one).
    """

    def __init__(self, start: Callable[[str], Stream], *, max_delay_s: float = 3.0, max_piece_chars: int = 1000,
                 max_buffered_chars: int = 20_000, clock: Callable[[], float] = time.monotonic):
        self._start = start
        self._clock = clock
        self._cond = threading.Condition()
        self._buffer = TextBuffer(max_delay_s=max_delay_s, max_piece_chars=max_piece_chars)
        self.max_buffered_chars = max_buffered_chars
        self._next_flush = 1
        self._input_done = False
        self._cancelled = False
        self._finished = False
        self._stream: Stream | None = None  # the piece in the engine
        self._piece: Piece | None = None  # the piece being read
        self.pieces: list[Piece] = []
        self._edges = PieceEdges()
        self._out: collections.deque[AudioChunk] = collections.deque()
        self._seq = 0
        self._audio_samples = 0
        self.created_at = clock()
        self.first_audio_at: float | None = None
        self.streams = 0  # streams started

    def __repr__(self) -> str:
        return f"SpeechContext({len(self.pieces)} pieces, {'cancelled' if self._cancelled else 'open'})"

    # ---- the writer's side (any thread) ---------------------------------------------------------

    @property
    def buffered_chars(self) -> int:
        with self._cond:
            return len(self._buffer)

    @property
    def input_done(self) -> bool:
        return self._input_done

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def ended(self) -> bool:
        return self._finished or self._cancelled

    @property
    def idle(self) -> bool:
        """Nothing buffered and nothing being generated: the context waits for text."""
        with self._cond:
            return self._stream is None and not self._buffer.text.strip() and not self._out

    def push(self, text: str) -> None:
        """More text of the utterance, to be spoken after what came before (kept verbatim)."""
        with self._cond:
            if self._input_done or self._cancelled:
                raise InvalidRequestError("this context has ended: start a new one for more text", param="context_id",
                                          code="context_ended")
            if len(self._buffer) + len(text) > self.max_buffered_chars:
                raise PayloadTooLargeError(
                    f"the context holds {len(self._buffer)} unspoken characters and this adds {len(text)}; at most "
                    f"{self.max_buffered_chars} may wait: send text closer to the pace it is spoken",
                    param="transcript", code="buffer_full")
            self._buffer.push(text, self._clock())
            self._cond.notify_all()

    def flush(self) -> int:
        """Speak everything buffered now; returns the flush's id (see `Piece.flush_ids`)."""
        with self._cond:
            flush_id = self._next_flush
            self._next_flush += 1
            if not self._cancelled:
                self._buffer.mark(flush_id)
                self._cond.notify_all()
            return flush_id

    def end_input(self) -> None:
        """No more text: speak what is buffered, then the utterance ends."""
        with self._cond:
            self._input_done = True
            self._cond.notify_all()

    def cancel(self) -> None:
        """Stop now (any thread): drop the buffered text, cancel the piece in the engine, end the reader."""
        with self._cond:
            if self._cancelled or self._finished:
                return
            self._cancelled = True
            self._buffer.clear()
            self._out.clear()
            stream = self._stream
            self._cond.notify_all()
        if stream is not None:
            stream.cancel()

    def close(self) -> None:
        """The reader is done: cancel unless the utterance finished."""
        self.cancel()

    # ---- the reader's side (one thread) ---------------------------------------------------------

    def __iter__(self) -> SpeechContext:
        return self

    def __next__(self) -> AudioChunk:
        """The utterance's next chunk (blocks while there is no text); StopIteration at its end or once
        cancelled. A piece's stream error is raised here."""
        while True:
            with self._cond:
                if self._out:
                    return self._out.popleft()
                if self._cancelled or self._finished:
                    raise StopIteration
                stream = self._stream
            if stream is None:
                self._begin_next_piece()
                continue
            try:
                chunk = next(stream)
            except StopIteration:
                chunk = None
            if chunk is None or chunk.is_last:
                self._end_piece(chunk)
                continue
            pcm = self._edges.push(chunk.pcm)
            if pcm.shape[1] or len(chunk.codes):
                return self._chunk(pcm, chunk.codes)

    def _begin_next_piece(self) -> None:
        piece = self._wait_for_piece()
        if piece is None:
            return
        if not piece.text or not is_speakable(piece.text):
            with self._cond:
                self._out.append(self._chunk(np.zeros((NUM_CHANNELS, 0), np.float32), piece=piece, is_pause=True))
            return
        stream = self._start(piece.text)
        self.streams += 1
        with self._cond:
            if self._cancelled:
                stream.cancel()
                return
            self._stream, self._piece = stream, piece
        self._edges.start()

    def _wait_for_piece(self) -> Piece | None:
        """The next piece, waiting for text (None: the utterance finished or was cancelled; the
        finishing chunk is queued)."""
        with self._cond:
            while not self._cancelled:
                now = self._clock()
                cut = self._buffer.take(now, force=self._input_done)
                if cut is not None:
                    piece = Piece(len(self.pieces), cut.text, cut.reason, cut.marks)
                    self.pieces.append(piece)
                    return piece
                if self._input_done:
                    self._finished = True
                    self._out.append(self._chunk(np.zeros((NUM_CHANNELS, 0), np.float32), is_last=True,
                                                 segment=len(self.pieces) - 1))
                    return None
                deadline = self._buffer.deadline()
                self._cond.wait(None if deadline is None else max(0.0, deadline - now))
            return None

    def _end_piece(self, last: AudioChunk | None) -> None:
        """The piece's stream ended: its last audio and the faded tail, then the pause after it."""
        with self._cond:
            stream, piece = self._stream, self._piece
            self._stream = self._piece = None
        assert stream is not None and piece is not None
        out = []
        if last is not None and last.pcm.shape[1]:
            out.append(self._chunk(self._edges.push(last.pcm), last.codes, piece=piece))
        tail = self._edges.end()
        if tail.shape[1]:
            out.append(self._chunk(tail, piece=piece))
        with self._cond:
            done = self._input_done and not self._buffer.text.strip()
            pause_s = 0.0 if done else pause_after_piece_s(piece)
            out.append(self._chunk(np.zeros((NUM_CHANNELS, round(pause_s * SAMPLE_RATE_HZ)), np.float32),
                                   piece=piece, is_pause=True))
            if not self._cancelled:
                self._out.extend(out)

    def _chunk(self, pcm: np.ndarray, codes: np.ndarray = _NO_CODES, *, piece: Piece | None = None,
               is_pause: bool = False, is_last: bool = False, segment: int = -1) -> AudioChunk:
        """The utterance's next chunk (reader thread; `seq` and the audio clock count here)."""
        piece = piece or self._piece
        now = self._clock()
        if pcm.shape[1] and self.first_audio_at is None and not is_pause:
            self.first_audio_at = now
        self._audio_samples += pcm.shape[1]
        first = None if self.first_audio_at is None else self.first_audio_at - self.created_at
        timings = Timings(first_audio_s=first, elapsed_s=now - self.created_at,
                          audio_s=self._audio_samples / SAMPLE_RATE_HZ)
        chunk = AudioChunk(seq=self._seq, pcm=pcm, codes=codes, is_last=is_last, timings=timings, is_pause=is_pause,
                           segment=piece.index if piece is not None else segment,
                           segment_text=piece.text if piece is not None else "")
        self._seq += 1
        return chunk


def pause_after_piece_s(piece: Piece) -> float:
    """Silence after a piece that more may follow: as between sentences of one request
    (`pause_after_chunk_s`) after a sentence, `MIN_PAUSE_S` after anything else."""
    if piece.reason == "sentence":
        return pause_after_chunk_s(piece.text)
    return MIN_PAUSE_S
