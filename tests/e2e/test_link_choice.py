"""static/player/link.js in Chromium's JS engine: the link reading, what it proves (a growing lag between
the server's chunk times and their arrival: the link set the pace), and the transport it picks."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

CHOOSE = """async ([mode, last]) => (await import('/player/link.js')).chooseTransport(mode, last)"""


@pytest.mark.parametrize(("mode", "last", "expected"), [
    ("auto", None, "f32"),  # nothing known: as before, and this utterance measures
    ("auto", {"transport": "f32", "bytesPerS": 2_000_000, "lowerBound": False}, "f32"),
    ("auto", {"transport": "f32", "bytesPerS": 300_000, "lowerBound": False}, "s16"),  # 1.56x for 16-bit
    ("auto", {"transport": "f32", "bytesPerS": 230_000, "lowerBound": False}, "opus"),  # 1.2x: no headroom
    ("auto", {"transport": "f32", "bytesPerS": 230_000, "lowerBound": True}, "f32"),  # the generator was slow
    ("auto", {"transport": "opus", "bytesPerS": 60_000, "lowerBound": True}, "opus"),
    ("lossless", {"transport": "f32", "bytesPerS": 100_000, "lowerBound": False}, "s16"),
    ("compressed", None, "opus"),
    ("compressed", {"transport": "f32", "bytesPerS": 9e9, "lowerBound": False}, "opus"),
])
def test_choice_follows_the_reading(static_page, mode, last, expected):
    assert static_page.evaluate(CHOOSE, [mode, last]) == expected


METER = """async ([lagStepMs, paceMs]) => {
  const { LinkMeter } = await import('/player/link.js');
  const m = new LinkMeter('f32');
  for (let i = 0; i < 10; i++) {   // 80 ms chunks of float32 (30,720 bytes), one every paceMs
    const at = 100 + i * paceMs, serverS = (100 + i * paceMs - i * lagStepMs) / 1000;
    m.progress(serverS, at);
    m.read(30720, at);
  }
  return { limited: m.linkLimited, bytesPerS: m.bytesPerS, audioPerS: m.audioPerS };
}"""


def test_a_growing_lag_means_the_link_set_the_pace(static_page):
    # Each chunk arrives 120 ms after the last, 60 ms later than the server made it: the link's pace.
    queued = static_page.evaluate(METER, [60, 120])
    assert queued["limited"] is True
    assert queued["audioPerS"] == pytest.approx(0.08 / 0.12, rel=1e-6)
    # The same arrival times, but the server made each chunk just before: the generator's pace.
    generated = static_page.evaluate(METER, [0, 120])
    assert generated["limited"] is False and generated["bytesPerS"] == queued["bytesPerS"]


def test_remembered_reading_is_a_lower_bound_unless_the_link_was_the_limit(static_page):
    result = static_page.evaluate("""async () => {
      const link = await import('/player/link.js');
      const read = (lagStepMs) => { const m = new link.LinkMeter('f32');
        for (let i = 0; i < 10; i++) { m.progress((100 + i * 120 - i * lagStepMs) / 1000, 100 + i * 120); m.read(30720, 100 + i * 120); }
        link.remember(m); return link.remembered(); };
      const queued = read(60), generated = read(0);
      const old = new link.LinkMeter('s16'); old.read(1, 0); old.read(19200, 100);   // no chunk times
      link.remember(old, Date.now() - link.MAX_AGE_MS - 1);
      return { queued: queued.lowerBound, generated: generated.lowerBound, expired: link.remembered() };
    }""")
    assert result == {"queued": False, "generated": True, "expired": None}
