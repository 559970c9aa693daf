"""`PieceWriter`: one context's chunks -> a protocol's messages, each piece's reports right after its audio.

Runs in the context's pump thread (`StreamPump`'s writer). Audio goes out as it comes, through the
context's `SpeechRender`. Each piece's `SegmentSpan` (the render's caption timeline, released once
its audio is out) gives what a protocol reports about the piece (estimated word times, flushes done),
sent right after the piece's last sample: output that holds the end of one piece and the start of the
next is cut there (raw samples only, so the cut is exact). Pieces with no audio are reported after
the pieces before them. A protocol says how audio, reports and the end are worded.
"""

from __future__ import annotations

import collections

from tts_core.speaking import Piece, SpeechContext
from tts_core.types import AudioChunk

from ..delivery.speech_output import SpeechRender

SAMPLE_BYTES = {"pcm": 2, "float32": 4, "mulaw": 1, "alaw": 1}  # the raw formats the sockets send


class PieceWriter:
    """See the module docstring; subclasses word `audio`, `reports` and `done`."""

    def __init__(self, render: SpeechRender, context: SpeechContext):
        self.render = render
        self.context = context
        self._width = SAMPLE_BYTES[render.spec.fmt] * render.spec.channels
        self._sent = 0  # output samples in the audio messages so far
        self._ended: collections.deque[int] = collections.deque()  # pieces whose audio has all been pushed
        self._voiced: set[int] = set()
        self._spans: dict[int, tuple[float, float]] = {}
        self._epoch: dict[int, int] = {}  # piece -> the flush id its audio belongs to (flushes before it + 1)
        self._flushes = 0

    # ---- what a protocol words ------------------------------------------------------------------

    def audio(self, data: bytes, flush_id: int) -> list:
        raise NotImplementedError

    def reports(self, piece: Piece, span: tuple[float, float] | None) -> list:
        raise NotImplementedError

    def done(self) -> list:
        return []

    # ---- the pump's writer ----------------------------------------------------------------------

    def __call__(self, chunk: AudioChunk) -> list:
        piece = chunk.segment
        if piece >= 0 and piece not in self._epoch:
            self._epoch[piece] = self._flushes + 1
            self._flushes += len(self.context.pieces[piece].flush_ids)
        if chunk.pcm.shape[1] and not chunk.is_pause:
            self._voiced.add(piece)
        data, spans = self.render.push(chunk)
        if chunk.is_pause and piece >= 0:
            self._ended.append(piece)
        return self._messages(data, spans, self._epoch.get(piece, self._flushes + 1))

    def finish(self) -> list:
        data, spans = self.render.finish()
        return [*self._messages(data, spans, self._flushes + 1, everything=True), *self.done()]

    def close(self) -> None:
        self.render.close()

    def _messages(self, data: bytes, spans, epoch: int, everything: bool = False) -> list:
        """`data` as audio messages, with each finished piece's reports right after its last sample."""
        for span in spans:
            self._spans[span.index] = (span.start, span.end)
        out, at = [], 0
        while self._ended and (everything or self._ended[0] in self._spans or self._ended[0] not in self._voiced):
            index = self._ended.popleft()
            span = self._spans.pop(index, None)
            if span is not None:  # the piece's samples before its reports
                end = round(span[1] * self.render.spec.sample_rate) - self._sent
                cut = min(len(data), at + max(0, end) * self._width)
                out += self._audio(data[at:cut], self._epoch.get(index, epoch))
                at = cut
            out += self.reports(self.context.pieces[index], span)
        return out + self._audio(data[at:], epoch)

    def _audio(self, data: bytes, flush_id: int) -> list:
        if not data:
            return []
        self._sent += len(data) // self._width
        return self.audio(data, flush_id)
