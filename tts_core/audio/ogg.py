"""Ogg pages for one Opus stream (RFC 3533, RFC 7845), each packet on a page of its own, written
the moment the encoder hands the packet over.

FFmpeg's Ogg muxer keeps the newest page until the next one exists (it may have to mark it the
stream's last), so a stream's bytes always lack the newest 20 ms packet: the first 80 ms chunk went
out with three of its four packets, and the player had 53 ms of it to play instead of 73 ms.
Here a page is final when it is written; the stream's last page is marked when the stream ends
(`end`), after the encoder's flush.

Page layout (27-byte header, lacing values, the packet): "OggS", version 0, flags (1 continued,
2 first page, 4 last page), the granule position (samples at 48 kHz, pre-skip included, after the
page's packet; 0 on the header pages), the stream's serial, the page's sequence number, the CRC,
the lacing values. The CRC is Ogg's (polynomial 0x04C11DB7, not reflected, no pre- or
post-inversion), computed with zlib's reflected CRC-32 on bit-reversed bytes.
"""

from __future__ import annotations

import secrets
import struct
import zlib

_FIRST, _LAST = 2, 4
MAX_PACKET = 255 * 255 - 1  # what one page's 255 lacing values can carry
_REVERSED = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def ogg_crc(data: bytes) -> int:
    """Ogg's CRC-32 of `data` (a page with its CRC field zeroed)."""
    register = ~zlib.crc32(data.translate(_REVERSED), 0xFFFFFFFF) & 0xFFFFFFFF
    return int(f"{register:032b}"[::-1], 2)


def opus_tags(vendor: str) -> bytes:
    """An OpusTags packet: `vendor` and no comments (RFC 7845 section 5.2)."""
    name = vendor.encode()
    return b"OpusTags" + struct.pack("<I", len(name)) + name + struct.pack("<I", 0)


class OggOpusWriter:
    """One Ogg/Opus stream's pages. `headers()` first (OpusHead, then OpusTags), then `packet()` per
    encoded packet with its granule position, then `end()`: every call returns its pages' bytes."""

    def __init__(self, opus_head: bytes, *, vendor: str = "moss-tts-nano", serial: int | None = None):
        if not opus_head.startswith(b"OpusHead"):
            raise ValueError("an Ogg/Opus stream begins with an OpusHead packet")
        self._head, self._vendor = bytes(opus_head), vendor
        self._serial = secrets.randbits(32) if serial is None else serial & 0xFFFFFFFF
        self._sequence = 0
        self._granule = 0
        self.ended = False

    @property
    def started(self) -> bool:
        """Its header pages went out."""
        return self._sequence > 0

    @property
    def pre_skip(self) -> int:
        return struct.unpack_from("<H", self._head, 10)[0]

    def _page(self, packet: bytes, granule: int, flags: int = 0) -> bytes:
        if len(packet) > MAX_PACKET:
            raise ValueError(f"an Opus packet of {len(packet)} bytes does not fit one Ogg page")
        # An empty last page carries no packet (no lacing value), any other page exactly one.
        lacing = b"" if not packet and flags & _LAST else bytes([255] * (len(packet) // 255) + [len(packet) % 255])
        header = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, self._serial, self._sequence, 0, len(lacing))
        page = header + lacing + packet
        self._sequence += 1
        crc = struct.pack("<I", ogg_crc(page))
        return page[:22] + crc + page[26:]

    def headers(self) -> bytes:
        return self._page(self._head, 0, _FIRST) + self._page(opus_tags(self._vendor), 0)

    def packet(self, data: bytes, granule: int) -> bytes:
        """One audio packet's page; `granule`: the samples decoded through it, pre-skip included."""
        if self.ended:
            raise ValueError("the Ogg stream has ended")
        self._granule = granule
        return self._page(bytes(data), granule)

    def end(self, last: tuple[bytes, int] | None = None) -> bytes:
        """The stream's last page: `last` (packet, granule) marked as the last, or, without it, an
        empty last page at the current granule position."""
        if self.ended:
            return b""
        self.ended = True
        if last is None:
            return self._page(b"", self._granule, _LAST)
        self._granule = last[1]
        return self._page(bytes(last[0]), last[1], _LAST)
