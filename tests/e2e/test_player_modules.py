"""The player's pure modules in Chromium's JS engine: the stream parsers, captions, the code snippet,
file names and 16-bit WAV round trips (static/*.js imported as the page imports them)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

pytestmark = pytest.mark.e2e


def framed(parts: list) -> bytes:
    out = b""
    for part in parts:
        if isinstance(part, dict):
            payload, kind = json.dumps(part, ensure_ascii=False).encode(), 1
        else:
            payload, kind = bytes(part), 0
        out += struct.pack("<IB", len(payload), kind) + payload
    return out


PARSE = """
async ([bytes, step]) => {
  const { FrameParser } = await import('/player/framing.js');
  const parser = new FrameParser();
  const all = new Uint8Array(bytes), out = [];
  for (let at = 0; at < all.length; at += step) {
    for (const item of parser.push(all.slice(at, at + step))) {
      out.push(item.kind === 'bytes' ? ['bytes', Array.from(item.data)] : ['event', item.event]);
    }
  }
  return { out, pending: parser.pendingBytes };
}
"""


@pytest.mark.parametrize("step", [1, 3, 5, 7, 64, 10_000])
def test_frame_parser_gives_the_same_items_whatever_the_network_reads(static_page, step):
    audio1 = np.arange(4, dtype="<i2").tobytes() + b"OggS"  # the transport's bytes, cut anywhere
    audio2 = bytes(range(200, 216))
    event = {"type": "speech.segment", "index": 0, "text": "Héllo 你好", "start": 0, "end": 0.5}
    body = framed([audio1, event, audio2, {"type": "speech.done", "audio_s": 0.5, "request_id": "x"}])
    result = static_page.evaluate(PARSE, [list(body), step])
    assert result["pending"] == 0
    kinds = [item[0] for item in result["out"]]
    audio = bytes(v for kind, data in result["out"] if kind == "bytes" for v in data)
    assert audio == audio1 + audio2
    events = [data for kind, data in result["out"] if kind == "event"]
    assert events[0] == event and events[1]["type"] == "speech.done"
    assert kinds.index("event") > 0  # in stream order: the event after the first audio


def test_an_incomplete_frame_waits_for_the_next_read(static_page):
    body = framed([b"\x01\x02\x03\x04"])
    result = static_page.evaluate(PARSE, [list(body[:-1]), 64])
    assert result["out"] == [] and result["pending"] == len(body) - 1


@pytest.mark.parametrize("body", [struct.pack("<IB", 0x7FFFFFFF, 0) + b"\x00" * 8,
                                  struct.pack("<IB", 8, 2) + b"\x00" * 8])
def test_a_corrupt_frame_is_an_error_not_a_hang(static_page, body):
    with pytest.raises(Exception, match="corrupt"):
        static_page.evaluate(PARSE, [list(body), 64])


def test_captions_and_the_segment_heard(static_page):
    result = static_page.evaluate("""async () => {
      const c = await import('/studio/captions.js');
      const segs = [{text: 'First  one.', start: 0, end: 1.25}, {text: 'Then --> second', start: 1.5, end: 3723.5}];
      return {srt: c.toSrt(segs), vtt: c.toVtt(segs), at: [0, 1.3, 2, 4000].map((t) => (c.segmentAt(segs, t) || {}).text ?? null)};
    }""")
    assert result["srt"] == ("1\n00:00:00,000 --> 00:00:01,250\nFirst one.\n\n"
                             "2\n00:00:01,500 --> 01:02:03,500\nThen → second\n")
    assert result["vtt"].startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.250\nFirst one.\n")
    assert result["at"] == ["First  one.", None, "Then --> second", None]  # a pause between them


def test_snippet_maps_the_stream_fields_to_the_speech_api(static_page):
    result = static_page.evaluate("""async () => {
      const s = await import('/studio/snippet.js');
      const request = {text: "It's here", voice: 'Nova', seed: 7, max_frames: 18, audio_temperature: 0.8,
        audio_top_p: 0.95, audio_top_k: 25, audio_repetition_penalty: 1.2, do_sample: true, speed: 1};
      return {body: s.speechBody(request), curl: s.curlSnippet('http://h:1', request),
              py: s.pythonSnippet('http://h:1', {...request, speed: 1.5, ref_audio_id: 'abc'})};
    }""")
    assert result["body"] == {"model": "moss-tts-nano", "input": "It's here", "response_format": "mp3",
                              "voice": "Nova", "temperature": 0.8, "top_p": 0.95, "top_k": 25,
                              "repetition_penalty": 1.2, "seed": 7, "max_frames": 18, "do_sample": True}
    assert "'\"'\"'" in result["curl"]  # the apostrophe survives the shell quoting
    assert "speed=1.5," in result["py"] and '"do_sample": True' in result["py"]
    assert '"ref_audio": "<base64 of your reference clip>"' in result["py"]
    compile(result["py"], "snippet.py", "exec")  # valid Python


def test_file_stems_and_wav16_round_trip(static_page):
    result = static_page.evaluate("""async () => {
      const h = await import('/studio/history.js'), w = await import('/studio/wav.js');
      const data = new Float32Array([0, 0.5, -0.5, 1.5, -1.5, 0.25]);
      const blob = w.wav16Blob([data.subarray(0, 2), data.subarray(2)], 48000);
      const back = w.decodeWav16(await blob.arrayBuffer());
      return {stem: h.fileStem('Nova', '  Hello   there, this is a test of the names we give files.  '),
              url: h.resultUrl('http://h/player/studio/player.html', 'abc123', 'mp3', 'Nova - Hi'),
              rate: back.rate, channels: back.channels, data: Array.from(back.data)};
    }""")
    assert result["stem"] == "Nova - Hello there, this is a test of the"  # eight words
    assert result["url"] == "http://h/api/tts/result/abc123.mp3?name=Nova+-+Hi"
    assert result["rate"] == 48_000 and result["channels"] == 2
    expected = np.round(np.clip([0, 0.5, -0.5, 1.5, -1.5, 0.25], -1, 1) * 32767) / 32767
    assert result["data"] == pytest.approx(expected.tolist(), abs=1e-7)
