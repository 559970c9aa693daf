"""How a context's pieces reach the engine: `piece_starter(synth, base, metrics)` submits each piece's
text as one request (`base` with the piece's text: its voice and sampling checked once, when the
context opened) and has the app's metrics watch the stream, as `delivery.streaming.open_stream` does
for a whole request. Runs on the context's pump thread."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tts_core.engine.stream import Stream
from tts_core.errors import InvalidRequestError
from tts_core.types import SynthesisRequest


def piece_starter(synth, base: SynthesisRequest, metrics) -> Callable[[str], Stream]:
    def start(text: str) -> Stream:
        try:
            stream = synth.submit(dataclasses.replace(base, text=text))
        except InvalidRequestError:
            if metrics is not None:
                metrics.rejected()
            raise
        if metrics is not None:
            metrics.watch(stream)
        return stream

    return start
