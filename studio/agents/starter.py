"""How a context's pieces reach the engine: `piece_starter(synth, base, metrics)` submits each piece's
text as one request (`base` with the piece's text: its voice and sampling checked once, when the
context opened), counted by the app's metrics as every HTTP stream is. Runs on the context's pump thread."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tts_core.engine.stream import Stream
from tts_core.types import SynthesisRequest

from ..delivery.streaming import submit_watched


def piece_starter(synth, base: SynthesisRequest, metrics) -> Callable[[str], Stream]:
    return lambda text: submit_watched(synth, dataclasses.replace(base, text=text), metrics)
