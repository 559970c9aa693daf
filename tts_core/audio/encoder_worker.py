"""An encoder worker process: `python -m tts_core.audio.encoder_worker`, started by `encoder_pool.py`.

It runs `encoders.StreamEncoder`s for the server's streams (one per open channel) and speaks the
messages of `encoder_wire.py` over its stdin and stdout. It imports numpy, PyAV and soxr, never
torch: a worker is small and starts in well under a second. It ends when its stdin closes (the
server closed the pool, or died: no worker outlives it). Ctrl-C in a terminal reaches the whole
process group; the worker ignores it and lets the server close it after its streams have drained.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from typing import BinaryIO

import numpy as np

from .encoder_wire import (
    CLOSE,
    ERROR,
    FINISH,
    HELLO,
    HELLO_CHANNEL,
    OK,
    OPEN,
    PUSH,
    STATS,
    Message,
    pack,
    read_message,
    result_payload,
)
from .encoders import StreamEncoder


class Worker:
    """The encoders of one worker process, keyed by channel."""

    def __init__(self) -> None:
        self.encoders: dict[int, StreamEncoder] = {}
        self.failed: dict[int, str] = {}  # channels whose OPEN failed: why (their next request's answer)
        self.requests = 0

    def stats(self) -> dict:
        return {"pid": os.getpid(), "open_streams": len(self.encoders), "requests": self.requests,
                "torch_loaded": "torch" in sys.modules}

    def handle(self, message: Message) -> bytes | None:
        """The answer to `message` (None: it needs none)."""
        self.requests += 1
        channel, op = message.channel, message.op
        try:
            if op == CLOSE:
                self.failed.pop(channel, None)
                encoder = self.encoders.pop(channel, None)
                if encoder is not None:
                    encoder.close()
                return None
            if op == STATS:
                return pack(channel, OK, json.dumps(self.stats()).encode())
            if op == OPEN:
                return self._open(message)
            encoder = self.encoders.get(channel)
            if channel in self.failed:
                raise ValueError(self.failed.pop(channel))
            if encoder is None:
                raise ValueError(f"channel {channel} is not open")
            if op == PUSH:
                samples = np.frombuffer(message.payload, dtype="<i2").reshape(encoder.channels, -1)
                data = encoder.encode_int16(samples)
            elif op == FINISH:
                del self.encoders[channel]
                data = encoder.finish()
            else:
                raise ValueError(f"unknown op {op}")
            return pack(channel, OK, result_payload(encoder.encoded_samples, encoder.frame_samples, data))
        except Exception as exc:  # this stream's problem only: the others go on
            dropped = self.encoders.pop(channel, None)
            if dropped is not None:
                dropped.close()
            return pack(channel, ERROR, f"{type(exc).__name__}: {exc}".encode())

    def _open(self, message: Message) -> None:
        try:
            spec = json.loads(message.payload)
            encoder = StreamEncoder(spec["fmt"], spec["sample_rate"], spec["channels"], bit_rate=spec["bit_rate"])
        except Exception as exc:  # answered at the channel's next request
            self.failed[message.channel] = f"{type(exc).__name__}: {exc}"
            return None
        self.encoders[message.channel] = encoder
        return None


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer messages until `inp` ends."""
    worker = Worker()
    out.write(pack(HELLO_CHANNEL, HELLO, json.dumps({"pid": os.getpid()}).encode()))
    out.flush()
    while (message := read_message(inp)) is not None:
        answer = worker.handle(message)
        if answer is not None:
            out.write(answer)
            out.flush()
    for encoder in worker.encoders.values():
        encoder.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s encoder-worker: %(message)s")
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stdout carries messages only: a stray print must not corrupt them
    with contextlib.suppress(BrokenPipeError):  # the server is gone
        serve(inp, out)


if __name__ == "__main__":
    main()
