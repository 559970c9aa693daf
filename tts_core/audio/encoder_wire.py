"""The messages between the server and its encoder worker processes (`encoder_pool.py`,
`encoder_worker.py`), over the worker's stdin and stdout.

A message is [u32 LE payload length][u32 LE channel id][u8 op][payload]. A channel is one stream's
encoder (or one stats request); the worker answers each request, except `CLOSE`, with one `OK` or
`ERROR` message on the same channel, in the order the requests came. `OPEN` and `CLOSE` get no
answer: a stream's encoder opens with its first audio, in one trip with it; an `OPEN` that failed
makes the channel's next request answer `ERROR` with its reason. Payloads:

- `OPEN`: JSON {fmt, sample_rate, channels, bit_rate};
- `PUSH`: int16 samples on the encoders' 16-bit grid, [channels, n] row by row (little-endian);
- `FINISH`: empty (the encoder's tail and trailer; the channel is closed after it);
- `CLOSE`: empty (drop the encoder without finishing: a stream cut short);
- `STATS`: empty; answered with JSON (`WorkerStats` fields);
- `OK` to PUSH / FINISH: [u64 LE encoded samples][u32 LE codec frame samples][the bytes];
- `ERROR`: a UTF-8 message; `HELLO`: the worker's first message, JSON {pid}, on channel 0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

HEADER = struct.Struct("<IIB")
RESULT = struct.Struct("<QI")
OPEN, PUSH, FINISH, CLOSE, STATS = 1, 2, 3, 4, 5
OK, ERROR, HELLO = 10, 11, 12
HELLO_CHANNEL = 0
# A push is one engine chunk after resampling (tens of kB); a bound keeps a corrupt length from
# making the reader allocate gigabytes.
MAX_PAYLOAD = 64 << 20


@dataclass(frozen=True, slots=True)
class Message:
    channel: int
    op: int
    payload: bytes


class WireError(RuntimeError):
    """The other side sent something that is not a message of this protocol."""


def pack(channel: int, op: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), channel, op) + payload


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    """`size` bytes, or None at a clean end of stream (nothing read)."""
    data = stream.read(size)
    if not data:
        return None
    while len(data) < size:  # a pipe may hand a message over in pieces
        more = stream.read(size - len(data))
        if not more:
            raise WireError(f"the stream ended inside a message ({len(data)} of {size} bytes)")
        data += more
    return data


class MessageBuffer:
    """Messages out of bytes fed in pieces of any size (a reader that takes whatever a pipe holds)."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        """The messages completed by `data` (the rest is kept for the next feed)."""
        self._data += data
        out, pos = [], 0
        while len(self._data) - pos >= HEADER.size:
            length, channel, op = HEADER.unpack_from(self._data, pos)
            if length > MAX_PAYLOAD:
                raise WireError(f"message of {length} bytes exceeds the {MAX_PAYLOAD}-byte bound")
            end = pos + HEADER.size + length
            if len(self._data) < end:
                break
            out.append(Message(channel, op, bytes(self._data[pos + HEADER.size:end])))
            pos = end
        del self._data[:pos]
        return out

    @property
    def partial(self) -> bool:
        """A message has begun and not ended (the stream must not end here)."""
        return bool(self._data)


def read_message(stream: BinaryIO) -> Message | None:
    """The next message, or None when the stream ended between messages."""
    head = _read_exact(stream, HEADER.size)
    if head is None:
        return None
    length, channel, op = HEADER.unpack(head)
    if length > MAX_PAYLOAD:
        raise WireError(f"message of {length} bytes exceeds the {MAX_PAYLOAD}-byte bound")
    payload = _read_exact(stream, length) if length else b""
    if length and payload is None:
        raise WireError("the stream ended after a message header")
    return Message(channel, op, payload or b"")


def result_payload(encoded_samples: int, frame_samples: int, data: bytes) -> bytes:
    return RESULT.pack(encoded_samples, frame_samples) + data


def parse_result(payload: bytes) -> tuple[int, int, bytes]:
    encoded, frame = RESULT.unpack_from(payload)
    return encoded, frame, payload[RESULT.size:]
