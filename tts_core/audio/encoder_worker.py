"""An encoder worker process: `python -m tts_core.audio.encoder_worker`, started by `encoder_pool.py`.

It runs `encoders.StreamEncoder`s for the server's streams (one per open channel) and speaks the
messages of `encoder_wire.py` over its stdin and stdout. It imports numpy, PyAV and soxr, never
torch: a worker is small and starts in well under a second. It ends when its stdin closes (the
server closed the pool, or died: no worker outlives it). Ctrl-C in a terminal reaches the whole
process group; the worker ignores it and lets the server close it after its streams have drained.

Order of work (`Backlog`): the worker reads whatever its stdin holds and answers next the request
whose audio a listener needs first: a piece of audio is due when its stream's encoder opened plus
the audio before it (a listener who started with the stream's first audio and plays in real
time). A stream's requests keep their order; across streams, a new stream's first audio no
longer waits behind pieces of streams far ahead of their listeners, as it did first come, first
served, when the engine runs far ahead of real time and the workers are busy.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import logging
import math
import os
import select
import signal
import sys
import time
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
    MessageBuffer,
    WireError,
    pack,
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


class Backlog:
    """Requests read and not yet handled: per channel in the order they came; `pop` gives the head
    that is due first (see the module docstring). Requests that carry no audio (open, close, stats)
    are due at once."""

    def __init__(self) -> None:
        self._channels: dict[int, collections.deque[tuple[float, int, Message]]] = {}
        self._clocks: dict[int, tuple[float, float]] = {}  # channel -> (opened at, samples per second)
        self._queued: dict[int, int] = {}  # channel -> samples of its pushes read so far
        self._order = itertools.count()  # ties: first come, first served
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, message: Message, now: float) -> None:
        channel, due = message.channel, -math.inf
        if message.op == OPEN:
            with contextlib.suppress(Exception):  # a bad spec is answered when it is handled
                spec = json.loads(message.payload)
                self._clocks[channel] = (now, float(spec["sample_rate"]) * int(spec["channels"]))
                self._queued[channel] = 0
        elif message.op in (PUSH, FINISH) and channel in self._clocks:
            opened, per_s = self._clocks[channel]
            due = opened + self._queued[channel] / per_s
            if message.op == PUSH:
                self._queued[channel] += len(message.payload) // 2  # int16 samples, every channel
        if message.op in (FINISH, CLOSE):
            self._clocks.pop(channel, None)
            self._queued.pop(channel, None)
        self._channels.setdefault(channel, collections.deque()).append((due, next(self._order), message))
        self._size += 1

    def pop(self) -> Message:
        channel = min(self._channels, key=lambda c: self._channels[c][0][:2])
        queue = self._channels[channel]
        message = queue.popleft()[2]
        self._size -= 1
        if not queue:
            del self._channels[channel]
        return message


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer messages until `inp` ends (in the order of `Backlog`)."""
    worker, backlog, buffer = Worker(), Backlog(), MessageBuffer()
    fd = inp.fileno()
    out.write(pack(HELLO_CHANNEL, HELLO, json.dumps({"pid": os.getpid()}).encode()))
    out.flush()
    ended = False
    while not ended or len(backlog):
        # Take everything the pipe holds (wait for it only when there is nothing else to do).
        while not ended and (not len(backlog) or select.select([fd], [], [], 0)[0]):
            data = os.read(fd, 1 << 20)
            if not data:
                if buffer.partial:
                    raise WireError("the stream ended inside a message")
                ended = True
                break
            now = time.monotonic()
            for message in buffer.feed(data):
                backlog.add(message, now)
        if len(backlog):
            answer = worker.handle(backlog.pop())
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
