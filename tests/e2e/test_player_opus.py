"""The player's Opus path in real Chromium: static/player/ogg.js (our Ogg demuxer) + static/player/opus.js
(WebCodecs AudioDecoder) on streams made by the server's own encoder, and the 16-bit fallback
when the browser has no AudioDecoder.

The page is served on http://localhost (WebCodecs needs a secure context) by a route handler:
nothing leaves the browser. PyAV (FFmpeg's libopus) decodes the same bytes as the reference.
"""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
from support.e2e_helpers import STATIC_DIR

from studio.delivery.transports import OPUS_BIT_RATE
from tts_core.audio.encoders import StreamEncoder

pytestmark = pytest.mark.e2e

ORIGIN = "http://localhost:8932"
CHUNK = 3840  # the engine's 80 ms chunks: every one of them is a join on the server


def _serve(route) -> None:
    name = route.request.url.removeprefix(ORIGIN).split("?")[0].lstrip("/")
    path = STATIC_DIR / name
    if name and path.is_file() and path.resolve().is_relative_to(STATIC_DIR):
        route.fulfill(body=path.read_text(), content_type="text/javascript")
    else:
        route.fulfill(body="<!doctype html><title>opus harness</title>", content_type="text/html")


def _page(browser, *, without_decoder: bool = False):
    page = browser.new_page()
    if without_decoder:  # a browser without WebCodecs audio (Firefox before 130, old Safari)
        page.add_init_script("delete window.AudioDecoder; delete window.EncodedAudioChunk;")
    page.route(f"{ORIGIN}/**", _serve)
    page.goto(f"{ORIGIN}/harness.html")
    return page


@pytest.fixture
def secure_page(browser):
    page = _page(browser)
    yield page
    page.close()


def tones(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 48_000)) / 48_000
    return np.stack([0.3 * np.sin(2 * np.pi * 440 * t), 0.2 * np.sin(2 * np.pi * 660 * t + 1)]).astype(np.float32)


def server_opus(pcm: np.ndarray) -> bytes:
    """What the route sends: one encoder fed the engine's 80 ms chunks."""
    encoder = StreamEncoder("opus", 48_000, 2, bit_rate=OPUS_BIT_RATE)
    data = b"".join(encoder.encode(pcm[:, i:i + CHUNK]) for i in range(0, pcm.shape[1], CHUNK))
    return data + encoder.finish()


def pyav_decode(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data), format="ogg") as container:
        return np.concatenate([f.to_ndarray() for f in container.decode(audio=0)], axis=1)


DECODE = """
async ([bytes, step]) => {
  const { OpusStreamDecoder } = await import('/player/opus.js');
  const decoder = new OpusStreamDecoder(), all = new Uint8Array(bytes), pieces = [];
  let reads = 0, outputsBeforeEnd = 0;
  for (let at = 0; at < all.length; at += step) {
    const out = await decoder.push(all.slice(at, at + step));
    reads += 1; outputsBeforeEnd += out.length; pieces.push(...out);
  }
  pieces.push(...await decoder.end());
  const n = pieces.reduce((s, p) => s + p.length, 0), pcm = new Float32Array(n);
  let o = 0;
  for (const p of pieces) { pcm.set(p, o); o += p.length; }
  return { pcm: Array.from(pcm), reads, outputsBeforeEnd, pending: decoder.pendingBytes };
}
"""


@pytest.mark.parametrize("step", [1000, 7, 100_000])
def test_webcodecs_decodes_the_servers_opus_to_the_exact_length_without_seams(secure_page, step):
    source = tones(1.27)  # not a whole number of packets: the last page trims the end
    data = server_opus(source)
    if step == 7:
        data_cut = data[: len(data) // 3]  # byte-by-byte-ish reads: the first third is enough to prove it
        result = secure_page.evaluate(DECODE, [list(data_cut), step])
        decoded = np.asarray(result["pcm"], np.float32).reshape(-1, 2).T
        reference = pyav_decode(data)[:, : decoded.shape[1]]
        assert decoded.shape[1] > 10 * CHUNK // 2
        np.testing.assert_allclose(decoded, reference, atol=2e-3)
        return
    result = secure_page.evaluate(DECODE, [list(data), step])
    decoded = np.asarray(result["pcm"], np.float32).reshape(-1, 2).T
    assert result["pending"] == 0
    assert decoded.shape == source.shape  # pre-skip dropped once, the end trimmed to the granule
    if step == 1000:
        assert result["outputsBeforeEnd"] > 0  # audio comes out as the bytes arrive, not at the end
    # The platform decoder agrees with FFmpeg's sample for sample (so the pre-skip is aligned) ...
    np.testing.assert_allclose(decoded, pyav_decode(data), atol=2e-3)
    # ... and no join of the server's 80 ms chunks is a seam: the step across each is no larger
    # than the signal's own steps (a gap or a click would be many times larger).
    steps = np.abs(np.diff(decoded, axis=1)).max(axis=0)
    joins = np.arange(CHUNK, decoded.shape[1], CHUNK) - 1
    inside = np.delete(steps, joins)
    assert steps[joins].max() <= 1.1 * inside.max(), (steps[joins].max(), inside.max())
    snr = 10 * np.log10((source**2).sum() / ((source - decoded) ** 2).sum())
    assert snr > 20, snr


WARM_DECODE = """
async ([bytes]) => {
  const Original = window.AudioDecoder;
  let made = 0;   // decoders constructed: the warm one, then any the stream makes itself
  window.AudioDecoder = class extends Original { constructor(init) { super(init); made += 1; } };
  try {
    const { OpusStreamDecoder, warmOpusDecoder } = await import('/player/opus.js');
    warmOpusDecoder();
    warmOpusDecoder();   // one spare at a time
    const madeAhead = made, decoder = new OpusStreamDecoder();
    const pieces = [...await decoder.push(new Uint8Array(bytes)), ...await decoder.end()];
    const n = pieces.reduce((s, p) => s + p.length, 0), pcm = new Float32Array(n);
    let o = 0;
    for (const p of pieces) { pcm.set(p, o); o += p.length; }
    return { pcm: Array.from(pcm), warm: decoder.warm, madeAhead, made };
  } finally {
    window.AudioDecoder = Original;
  }
}
"""


def test_a_decoder_started_ahead_decodes_the_stream_exactly(secure_page):
    """The stream adopts the decoder started before its bytes (configured without the OpusHead, so
    the pre-skip is dropped by opus.js, not the platform): no decoder is made after the first
    bytes, and the audio is what FFmpeg decodes, to the sample."""
    source = tones(0.53)
    data = server_opus(source)
    result = secure_page.evaluate(WARM_DECODE, [list(data)])
    assert (result["madeAhead"], result["made"], result["warm"]) == (1, 1, True)
    decoded = np.asarray(result["pcm"], np.float32).reshape(-1, 2).T
    assert decoded.shape == source.shape
    np.testing.assert_allclose(decoded, pyav_decode(data), atol=2e-3)


def test_a_stream_with_output_gain_gets_a_decoder_of_its_own(secure_page):
    """An OpusHead a decoder would not assume (here an output gain) is not given the spare."""
    data = bytearray(server_opus(tones(0.2)))
    head = data.index(b"OpusHead")
    data[head + 16 : head + 18] = (256).to_bytes(2, "little", signed=True)  # +1 dB (the CRC is not read)
    result = secure_page.evaluate(WARM_DECODE, [list(data)])
    assert (result["madeAhead"], result["made"], result["warm"]) == (1, 2, False)


def test_without_audio_decoder_the_player_asks_for_16_bit(browser):
    page = _page(browser, without_decoder=True)
    try:
        result = page.evaluate("""async () => {
          const { chooseTransport } = await import('/player/transport.js');
          return { auto: await chooseTransport(), forced: await chooseTransport('opus'),
                   has: typeof window.AudioDecoder };
        }""")
        assert result == {"auto": "s16", "forced": "s16", "has": "undefined"}
    finally:
        page.close()


def test_with_audio_decoder_the_player_asks_for_opus(secure_page):
    chosen = secure_page.evaluate("""async () => {
      const { chooseTransport } = await import('/player/transport.js');
      return [await chooseTransport(), await chooseTransport('s16')];
    }""")
    assert chosen == ["opus", "s16"]  # a forced 16-bit stream (tests, benchmarks) stays 16-bit


def test_s16_decoder_reads_whole_frames_across_reads(secure_page):
    pcm = tones(0.05)
    ints = np.round(np.clip(pcm, -1, 1) * 32767).astype("<i2").T.tobytes()
    result = secure_page.evaluate("""async ([bytes]) => {
      const { makeDecoder } = await import('/player/transport.js');
      const d = makeDecoder('s16le'), all = new Uint8Array(bytes), out = [];
      for (let at = 0; at < all.length; at += 3) for (const p of await d.push(all.slice(at, at + 3))) out.push(...p);
      return { out, pending: d.pendingBytes };
    }""", [list(ints)])
    assert result["pending"] == 0
    decoded = np.asarray(result["out"], np.float32).reshape(-1, 2).T
    np.testing.assert_allclose(decoded, np.clip(pcm, -1, 1), atol=0.5 / 32767 + 1e-7)
