"""`tts_core.audio.ogg`: Opus's Ogg pages, each packet's written as the encoder hands it over."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from support.stream_decoding import decode_progressively

from tts_core.audio.encoders import StreamEncoder
from tts_core.audio.ogg import OggOpusWriter, ogg_crc

SR = 48_000
PIECE = 3840  # one codec frame (80 ms)


def _pages(data: bytes) -> list[dict]:
    """Every page of `data` (whole pages only): flags, granule, its packets' sizes, CRC checked."""
    pages, at = [], 0
    while at < len(data):
        assert data[at : at + 4] == b"OggS", at
        flags, granule = data[at + 5], struct.unpack_from("<q", data, at + 6)[0]
        lacing = data[at + 27 : at + 27 + data[at + 26]]
        end = at + 27 + len(lacing) + sum(lacing)
        page = bytearray(data[at:end])
        crc, page[22:26] = struct.unpack_from("<I", page, 22)[0], b"\0\0\0\0"
        assert crc == ogg_crc(bytes(page)), f"page {len(pages)}: bad CRC"
        sizes, size = [], 0
        for value in lacing:
            size += value
            if value < 255:
                sizes.append(size)
                size = 0
        pages.append({"flags": flags, "granule": granule, "packets": sizes, "body": bytes(page[27 + len(lacing) :])})
        at = end
    return pages


def _tone(samples: int, channels: int = 2) -> np.ndarray:
    t = np.arange(samples) / SR
    return np.stack([0.3 * np.sin(2 * np.pi * (220 + 110 * c) * t) for c in range(channels)]).astype(np.float32)


def test_crc_is_oggs_polynomial() -> None:
    rng = np.random.default_rng(1)
    for size in (0, 1, 27, 300, 4000):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        register = 0  # the plain MSB-first CRC-32 of RFC 3533: polynomial 0x04C11DB7, no inversions
        for byte in data:
            register ^= byte << 24
            for _ in range(8):
                register = ((register << 1) ^ 0x04C11DB7 if register & 0x80000000 else register << 1) & 0xFFFFFFFF
        assert ogg_crc(data) == register, size


@pytest.mark.parametrize(("rate", "channels"), [(48_000, 2), (24_000, 1)])
def test_every_packet_goes_out_with_the_audio_that_made_it(rate: int, channels: int) -> None:
    """After each piece, the pages out carry every packet the encoder made: the last page's granule
    (48 kHz) is what `encoded_samples` says (the packets' durations, the pre-skip's included),
    nothing is held for the next piece; the last page's granule trims the stream to its length."""
    encoder = StreamEncoder("opus", rate, channels)
    pcm = _tone(4 * PIECE + 200, channels)[:, :: SR // rate]
    piece = PIECE * rate // SR
    pre_skip, pages = None, []
    for at in range(0, pcm.shape[1], piece):
        out = _pages(encoder.encode(pcm[:, at : at + piece]))
        if pre_skip is None:  # the first piece brings the header pages, then its packets
            assert [p["flags"] for p in out[:2]] == [2, 0] and out[0]["granule"] == out[1]["granule"] == 0
            assert out[0]["body"].startswith(b"OpusHead") and out[1]["body"].startswith(b"OpusTags")
            pre_skip = OggOpusWriter(out[0]["body"]).pre_skip
            out = out[2:]
        pages += out
        if out:
            assert out[-1]["granule"] == encoder.encoded_samples * (SR // rate)
    assert all(len(p["packets"]) == 1 and p["flags"] == 0 for p in pages)  # one packet a page
    assert len(_pages(encoder.encode(np.zeros((channels, 0), np.float32)))) == 0
    last = _pages(encoder.finish())
    assert [p["flags"] for p in last] == [0] * (len(last) - 1) + [4]  # the stream's last page is marked
    assert last[-1]["granule"] == pcm.shape[1] * (SR // rate) + pre_skip  # the end trim: the exact length


def test_first_piece_decodes_to_all_but_the_pre_skip() -> None:
    """FFmpeg decodes the first piece's bytes alone to the piece less the encoder's 312-sample look-ahead."""
    encoder = StreamEncoder("opus", SR, 2)
    first = encoder.encode(_tone(PIECE))
    decoded = decode_progressively("opus", [first])
    assert decoded.samples == PIECE - 312


def test_a_stream_without_audio_is_headers_and_an_empty_last_page() -> None:
    pages = _pages(StreamEncoder("opus", SR, 2).finish())
    assert [(p["flags"], p["granule"], len(p["packets"])) for p in pages[1:]] == [(0, 0, 1), (4, 0, 0)]
    assert pages[0]["flags"] == 2
