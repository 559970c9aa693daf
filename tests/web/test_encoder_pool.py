"""The encoder worker pool (`tts_core/audio/encoder_pool.py`) without a server: same bytes as the
in-process encoder, a dead worker fails only its own streams and is replaced, cut streams leave no
encoder open in the worker, the workers never import torch and never outlive the server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from support.stream_decoding import decode_progressively

from studio.delivery.speech_output import OutputSpec, RawWriter, SpeechRender
from studio.flags import parse_config
from tts_core.audio.encoder_pool import (
    EncoderPool,
    EncoderWorkerError,
    PooledEncoder,
    default_encoder_processes,
    open_encoder,
)
from tts_core.audio.encoders import StreamEncoder
from tts_core.types import AudioChunk, Timings

REPO_ROOT = Path(__file__).resolve().parents[2]
CHUNK = 3840  # one engine frame at 48 kHz
EXIT_WAIT_S = 20.0  # a bound on waiting for a process to end, not a measured timing


@pytest.fixture(scope="module")
def pool():
    pool = EncoderPool(2)
    pool.start()
    assert pool.wait_ready()
    yield pool
    pool.close()


def _audio(channels: int = 2, seconds: float = 1.5, rate: int = 48_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)
    return np.stack([tone * (1 + 0.1 * c) for c in range(channels)]).astype(np.float32)


def _encode(encoder, pcm: np.ndarray, step: int = CHUNK, *, wait: bool = False) -> tuple[bytes, list[int]]:
    """All bytes, and `encoded_samples` after each call (what RawWriter's start hold reads); `wait`:
    each piece's bytes collected at once (a pooled encoder otherwise hands them out later)."""
    out, counts = b"", []
    for i in range(0, pcm.shape[1], step):
        out += encoder.encode(pcm[:, i:i + step])
        if wait:
            out += encoder.collect(wait=True)
            assert encoder.pending_samples == 0
        counts.append(encoder.encoded_samples)
    out += encoder.finish()
    counts.append(encoder.encoded_samples)
    return out, counts


def _wait_exit(pid: int) -> bool:
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child: reap it so it does not linger as a zombie
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(("fmt", "rate", "channels"), [("mp3", 48_000, 2), ("mp3", 24_000, 1), ("aac", 48_000, 2),
                                                       ("flac", 44_100, 2), ("opus", 48_000, 2)])
def test_pool_gives_the_in_process_bytes(pool, fmt, rate, channels):
    pcm = _audio(channels, rate=rate)
    local, local_counts = _encode(StreamEncoder(fmt, rate, channels), pcm)
    pooled_encoder = pool.open(fmt, rate, channels)
    assert isinstance(pooled_encoder, PooledEncoder)
    pooled, pooled_counts = _encode(pooled_encoder, pcm)  # pipelined: bytes come back a call or more later
    waited, waited_counts = _encode(pool.open(fmt, rate, channels), pcm, wait=True)
    assert waited_counts == local_counts  # collected at once: the in-process encoder's counts
    assert pooled_counts[-1] == local_counts[-1]
    assert all(p <= w for p, w in zip(pooled_counts, local_counts, strict=True))  # never ahead of its bytes
    for got in (pooled, waited):
        if fmt == "opus":  # the Ogg writer draws a random stream serial number: compare the audio
            assert len(got) == len(local)
            np.testing.assert_array_equal(decode_progressively(fmt, [got]).pcm, decode_progressively(fmt, [local]).pcm)
        else:
            assert got == local


def _chunks(count: int = 12, seconds: float = 0.96, sentence: int = 0) -> list[AudioChunk]:
    """Engine chunks of `seconds` in all; with `sentence`, a new caption segment every that many."""
    return [AudioChunk(seq=i, pcm=p, codes=np.zeros((1, 16), np.int64), is_last=i == count - 1,
                       timings=Timings(0.0, 0.0, 0.0), segment=i // sentence if sentence else 0,
                       segment_text=f"s{i // sentence}" if sentence else "")
            for i, p in enumerate(np.split(_audio(2, seconds=seconds), count, axis=1))]


def test_speech_render_with_a_pool_sends_the_same_stream(pool):
    """The delivery path (stretch, resampling, start hold) over the pool: the same response bytes,
    the first ones at the same chunk (the hold waits for the worker's answers); later ones may come
    a chunk or more later (pipelined), never earlier."""
    spec = OutputSpec("mp3", 24_000, 1, speed=1.25)
    chunks = _chunks()

    def response(with_pool):
        writer = RawWriter(SpeechRender(spec, pool=with_pool))
        return [writer(c) for c in chunks] + [writer.finish()]

    pooled, local = response(pool), response(None)
    assert b"".join(pooled) == b"".join(local)
    first = next(i for i, data in enumerate(local) if data)
    assert next(i for i, data in enumerate(pooled) if data) == first and pooled[first].startswith(local[first])
    sent_pooled = np.cumsum([len(d) for d in pooled])
    assert (sent_pooled <= np.cumsum([len(d) for d in local])).all()


def test_a_streams_start_over_the_pool_comes_with_its_own_chunks(pool):
    """The player's Opus: until START_S of audio went out, each chunk's bytes come with that chunk,
    as in process (a listener's first sound must not wait a chunk); later ones may be pipelined."""
    from studio.delivery.speech_output import START_S

    spec = OutputSpec("opus", 48_000, 2, bit_rate=160_000)
    chunks = _chunks(24, 1.92)

    def sent(with_pool):
        render = SpeechRender(spec, pool=with_pool, start_s=START_S)
        try:
            return [len(render.push(chunk)[0]) for chunk in chunks]
        finally:
            render.close()  # the module's pool is shared: no stream left open in it

    pooled, local = sent(pool), sent(None)
    start = next(i for i, n in enumerate(np.cumsum([c.pcm.shape[1] for c in chunks])) if n >= START_S * 48_000)
    assert pooled[:start] == local[:start] and sum(local[:start]) > 0


def test_sse_captions_follow_their_audio_over_the_pool(pool):
    """Pipelined, a caption still comes after the audio it ends in: it waits for the worker's
    answer for that audio. The events, joined audio and captions, are the in-process ones."""
    spec = OutputSpec("mp3", 48_000, 2, captions=True)
    chunks = _chunks(24, 1.92, sentence=5)

    def events(with_pool):
        render = SpeechRender(spec, pool=with_pool)
        out = []
        for chunk in chunks:
            data, spans = render.push(chunk)
            out.append((data, [span.event() for span in spans], render.encoded_samples, render.output_samples))
        data, spans = render.finish()
        return [*out, (data, [span.event() for span in spans], render.encoded_samples, render.output_samples)]

    pooled, local = events(pool), events(None)
    assert b"".join(step[0] for step in pooled) == b"".join(step[0] for step in local)
    assert [e for step in pooled for e in step[1]] == [e for step in local for e in step[1]]
    # A caption goes out with the bytes of its audio: at least those the in-process encoder had
    # handed out once that audio had gone in.
    assert sum(len(step[1]) for step in local[:-1]) >= 3
    for _, spans, encoded, _ in pooled:
        for event in spans:
            audio_in = next(step for step in local if step[3] >= round(event["end"] * 48_000))
            assert encoded >= audio_in[2]


def test_raw_formats_and_no_pool_stay_in_process(pool):
    assert isinstance(open_encoder(pool, "pcm", 48_000, 2), StreamEncoder)
    assert isinstance(open_encoder(None, "mp3", 48_000, 2), StreamEncoder)
    with pytest.raises(ValueError, match="opus runs at"):  # the in-process encoder's error, before any pipe
        pool.open("opus", 44_100, 2)


def test_worker_does_not_import_torch(pool):
    import torch  # noqa: F401  (this process has it; the workers must not)

    stats = pool.worker_stats()
    assert len(stats) == 2 and not any(s["torch_loaded"] for s in stats)


def test_cut_streams_close_their_encoders_in_the_worker(pool):
    pcm = _audio(2, seconds=0.5)
    encoders = [pool.open("mp3", 48_000, 2) for _ in range(4)]
    for encoder in encoders[:3]:
        encoder.encode(pcm)
    assert sum(s["open_streams"] for s in pool.worker_stats()) == 3  # the fourth never had audio: never opened
    assert pool.stats().open_streams == 4
    for encoder in encoders:
        encoder.close()  # a stream cut short: no finish
        encoder.close()  # closing twice is harmless
    assert sum(s["open_streams"] for s in pool.worker_stats()) == 0
    assert pool.stats().open_streams == 0


def test_a_failing_stream_is_closed_and_the_worker_goes_on(pool):
    encoder = pool.open("mp3", 48_000, 2, bit_rate=-5)  # refused by the worker's encoder
    with pytest.raises(EncoderWorkerError):
        encoder.encode(_audio(2, seconds=0.2))
    assert pool.stats().open_streams == 0
    assert sum(s["open_streams"] for s in pool.worker_stats()) == 0
    fine = pool.open("mp3", 48_000, 2)
    assert _encode(fine, _audio(2))[0] == _encode(StreamEncoder("mp3", 48_000, 2), _audio(2))[0]


def test_a_dead_worker_fails_only_its_streams_and_is_replaced():
    pool = EncoderPool(2)
    pool.start()
    try:
        assert pool.wait_ready()
        pcm = _audio(2)
        doomed, survivor = pool.open("mp3", 48_000, 2), pool.open("mp3", 48_000, 2)
        assert doomed.worker_pid != survivor.worker_pid  # least-loaded: one stream per worker
        doomed.encode(pcm[:, :CHUNK])
        survivor_bytes = survivor.encode(pcm[:, :CHUNK])
        os.kill(doomed.worker_pid, 9)
        assert _wait_exit(doomed.worker_pid)
        with pytest.raises(EncoderWorkerError, match="its streams were ended"):
            for i in range(CHUNK, pcm.shape[1], CHUNK):
                doomed.encode(pcm[:, i:i + CHUNK])
        doomed.close()
        for i in range(CHUNK, pcm.shape[1], CHUNK):
            survivor_bytes += survivor.encode(pcm[:, i:i + CHUNK])
        survivor_bytes += survivor.finish()
        assert survivor_bytes == _encode(StreamEncoder("mp3", 48_000, 2), pcm)[0]
        assert pool.restarts == 1 and pool.live == 2 and pool.wait_ready()
        assert pool.stats().open_streams == 0
        assert _encode(pool.open("mp3", 48_000, 2), pcm)[0] == survivor_bytes  # the new worker serves
    finally:
        pool.close()


def test_close_stops_the_workers():
    pool = EncoderPool(2)
    pool.start()
    assert pool.wait_ready()
    pids = pool.pids()
    pool.open("mp3", 48_000, 2).encode(_audio(2, seconds=0.2))  # an open stream does not keep it alive
    pool.close()
    assert all(_wait_exit(pid) for pid in pids)
    assert pool.live == 0


def test_workers_end_when_the_server_is_killed():
    """No orphans: a server killed without any clean-up leaves workers that end on their own."""
    script = textwrap.dedent("""
        import os, sys
        from tts_core.audio.encoder_pool import EncoderPool
        pool = EncoderPool(2)
        pool.start()
        assert pool.wait_ready()
        print(" ".join(map(str, pool.pids())), flush=True)
        sys.stdin.readline()
        os.kill(os.getpid(), 9)
    """)
    server = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in server.stdout.readline().split()]
        assert len(pids) == 2
        server.stdin.write("\n")
        server.stdin.flush()
        server.wait(EXIT_WAIT_S)
        assert server.returncode == -9
        assert all(_wait_exit(pid) for pid in pids)
    finally:
        server.kill()
        server.wait()


def test_default_and_flag():
    assert [default_encoder_processes(n) for n in (1, 2, 3, 4, 16, 64)] == [0, 1, 2, 2, 14, 62]
    assert parse_config(["--encoder-processes", "3"]).server.encoder_processes == 3
    assert parse_config(["--encoder-processes", "0"]).server.encoder_processes == 0
    assert parse_config([]).server.encoder_processes == default_encoder_processes()
    with pytest.raises(SystemExit):
        parse_config(["--encoder-processes", "-1"])


def test_environment_twin(monkeypatch):
    monkeypatch.setenv("MOSS_TTS_ENCODER_PROCESSES", "2")
    assert parse_config([]).server.encoder_processes == 2


def test_the_worker_answers_first_the_audio_a_listener_needs_first():
    """`Backlog`: per stream in order; across streams by when a real-time listener needs the piece
    (its stream's open time + the audio before it); requests without audio at once."""
    import json as _json

    from tts_core.audio.encoder_wire import CLOSE, FINISH, OPEN, PUSH, STATS, Message
    from tts_core.audio.encoder_worker import Backlog

    spec = _json.dumps({"fmt": "mp3", "sample_rate": 48_000, "channels": 2, "bit_rate": None}).encode()
    piece = bytes(2 * 2 * CHUNK)  # 80 ms of int16 stereo
    backlog = Backlog()
    backlog.add(Message(1, OPEN, spec), now=10.0)
    for _ in range(5):  # stream 1 is 400 ms ahead
        backlog.add(Message(1, PUSH, piece), now=10.0)
    backlog.add(Message(1, FINISH, b""), now=10.0)
    backlog.add(Message(2, OPEN, spec), now=10.1)  # stream 2 starts 100 ms later
    backlog.add(Message(2, PUSH, piece), now=10.1)
    backlog.add(Message(3, STATS, b""), now=10.2)
    backlog.add(Message(4, CLOSE, b""), now=10.2)
    order = []
    while len(backlog):
        message = backlog.pop()
        order.append((message.channel, message.op))
    assert order == [(1, OPEN), (2, OPEN), (3, STATS), (4, CLOSE),  # at once, as they came
                     (1, PUSH), (1, PUSH),  # due at 10.00 and 10.08
                     (2, PUSH),  # due at 10.10: before stream 1's pieces due at 10.16 ...
                     (1, PUSH), (1, PUSH), (1, PUSH), (1, FINISH)]


def test_messages_fed_in_pieces_of_any_size_come_out_whole():
    from tts_core.audio.encoder_wire import PUSH, STATS, Message, MessageBuffer, pack

    sent = [Message(7, PUSH, bytes(range(200)) * 3), Message(8, STATS, b""), Message(9, PUSH, b"x")]
    wire = b"".join(pack(m.channel, m.op, m.payload) for m in sent)
    for size in (1, 5, 13, len(wire)):
        buffer, got = MessageBuffer(), []
        for i in range(0, len(wire), size):
            got += buffer.feed(wire[i:i + size])
        assert got == sent and not buffer.partial
    assert MessageBuffer().feed(wire[:7]) == []
