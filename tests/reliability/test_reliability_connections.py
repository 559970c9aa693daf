"""Slow and idle clients (issue 14, findings 3 and 6): stalled uploads, slow bodies, idle and
dribbling connections, the connection cap, log storms. The server is built as `python app.py`
builds it (create_app under the guarded uvicorn protocol) with small limits: a cap of 24
connections, 1.5 s for a request head or a pause in a body, 1 s idle keep-alive. Deadlines in
these tests only bound how long a test may wait before it fails; nothing asserts a duration.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from support.reliability_common import INPROC_MAX_UPLOAD, port_of

from bench.lib.reliability_attacks import HeldSockets, stalled_upload_head
from bench.lib.reliability_clients import listen, raw_http, read_reply
from studio.limits.logstorm import LogStormFilter

pytestmark = pytest.mark.slow

CAP = 24
WAIT_S = 30.0  # longest any step may take before the test fails (the limits are 1-2 s)


@pytest.fixture(scope="module")
def guarded(data_dir, tmp_path_factory, gradio_dir) -> Iterator:
    from support.reliability_servers import GuardedServer, tiny_service

    from studio.app import create_app
    from studio.settings import ServerSettings

    service = tiny_service(data_dir, tmp_path_factory.mktemp("guarded_cache"))
    settings = ServerSettings(max_upload_bytes=INPROC_MAX_UPLOAD, max_text_chars=500,
                              lm_id=str(data_dir / "parity" / "tiny_lm"), codec_id=str(data_dir / "parity" / "tiny_codec"),
                              body_idle_s=1.5, body_min_rate_bps=16 * 1024, max_connections=CAP, fd_reserve=0,
                              header_timeout_s=1.5, keep_alive_s=1.0)
    app = create_app(service, settings)
    with GuardedServer(app, settings) as server:
        server.app, server.settings, server.counters = app, settings, app.state.guard_counters
        yield server


def _body_guard(app):
    from studio.limits.guards import BodyLimitMiddleware

    layer = app.middleware_stack
    while layer is not None and not isinstance(layer, BodyLimitMiddleware):
        layer = getattr(layer, "app", None)
    assert layer is not None, "BodyLimitMiddleware not installed"
    return layer


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_stalled_uploads_do_not_lock_out_other_requests(guarded) -> None:
    """Finding 3: headers announcing a body just under the limit, then nothing. They used to
    reserve the whole in-flight budget before any byte arrived (every POST then got 503, for
    good). Now they hold nothing, synthesis is served meanwhile, and each gets 408 and is closed."""
    declared = guarded.settings.body_limit_bytes - 1
    timeouts = guarded.counters.body_timeouts
    sockets = [socket.create_connection(("127.0.0.1", port_of(guarded)), timeout=WAIT_S) for _ in range(8)]
    try:
        for sock in sockets:
            sock.sendall(stalled_upload_head(declared))
        first_audio, audio_bytes, status = listen(guarded.url, timeout_s=WAIT_S * 2)
        assert status == 200 and audio_bytes > 0 and first_audio is not None
        assert _body_guard(guarded.app).inflight_bytes < declared  # they hold nothing (the listener: its body)
        replies = [read_reply(sock, WAIT_S) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    for reply in replies:
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert b'"request_timeout"' in reply and b"connection: close" in reply.lower()
    assert guarded.counters.body_timeouts - timeouts == len(sockets)


@pytest.mark.timeout(120)
def test_a_body_sent_too_slowly_gets_408(guarded) -> None:
    """A client that keeps sending, a few bytes at a time, far below the minimum rate."""
    with socket.create_connection(("127.0.0.1", port_of(guarded)), timeout=WAIT_S) as sock:
        sock.sendall(stalled_upload_head(100_000, route="/api/tts/stream") + b'{"text": "')
        deadline = time.monotonic() + WAIT_S
        reply = b""
        while not reply and time.monotonic() < deadline:
            try:
                sock.sendall(b"aa")
            except OSError:
                break
            sock.settimeout(0.3)
            try:
                reply = sock.recv(65536)
            except TimeoutError:
                continue
        reply += read_reply(sock, 5)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]


@pytest.mark.timeout(60)
def test_bodies_in_flight_are_charged_as_they_arrive(guarded) -> None:
    """Uploads that have really sent most of their bodies hold the in-flight budget: the next
    large one gets 503 + Retry-After; once they go away the budget is whole again."""
    guard = _body_guard(guarded.app)
    per_request = guarded.settings.body_limit_bytes - 1
    holders = guarded.settings.inflight_body_limit_bytes // per_request
    head = stalled_upload_head(per_request).decode()
    sent = per_request - 16
    sockets = []
    try:
        for _ in range(holders):
            sock = socket.create_connection(("127.0.0.1", port_of(guarded)), timeout=WAIT_S)
            sock.sendall(head.encode() + b'{"input": "' + b"a" * (sent - 11))
            sockets.append(sock)
        _wait_for(lambda: guard.inflight_bytes >= holders * sent, "the holders' bodies to arrive")
        status, reply = raw_http(port_of(guarded), head, [b"{}"])
        assert status == 503, reply[:300]
        assert b"retry-after: 2" in reply.lower() and b'"server_busy"' in reply
    finally:
        for sock in sockets:
            sock.close()
    _wait_for(lambda: guard.inflight_bytes == 0, "the budget to be released")
    assert httpx.get(guarded.url + "/v1/models", timeout=WAIT_S).status_code == 200


@pytest.mark.timeout(60)
def test_idle_and_dribbling_connections_are_closed(guarded) -> None:
    """Finding 6: idle connections were never closed. Silent ones are closed; a request head sent
    a byte at a time gets 408; a kept-alive connection that goes quiet is closed."""
    timeouts = guarded.counters.head_timeouts
    with socket.create_connection(("127.0.0.1", port_of(guarded)), timeout=WAIT_S) as idle:
        assert read_reply(idle, WAIT_S) == b""  # closed without a word
    with socket.create_connection(("127.0.0.1", port_of(guarded)), timeout=WAIT_S) as slow:
        reply, deadline = b"", time.monotonic() + WAIT_S
        for byte in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * 4000:
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.05)
            if time.monotonic() > deadline:
                break
        reply = read_reply(slow, WAIT_S)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    with socket.create_connection(("127.0.0.1", port_of(guarded)), timeout=WAIT_S) as kept:
        kept.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_reply(kept, WAIT_S).startswith(b"HTTP/1.1 200")
        assert read_reply(kept, WAIT_S) == b""  # the idle keep-alive ends
    assert guarded.counters.head_timeouts - timeouts >= 2


@pytest.fixture(scope="module")
def capped() -> Iterator:
    """A server with the same protocol and cap, and a request-head deadline long enough for holders
    to hold their connections through the test (the app behind the protocol does not matter here)."""
    from fastapi import FastAPI
    from support.reliability_servers import GuardedServer

    from studio.limits.guards import GuardCounters
    from studio.settings import ServerSettings

    app = FastAPI()
    app.state.guard_counters = GuardCounters()

    @app.get("/ping")
    def ping() -> dict:
        return {"ok": True}

    with GuardedServer(app, ServerSettings(max_connections=CAP, fd_reserve=0, header_timeout_s=120)) as server:
        server.counters = app.state.guard_counters
        yield server


@pytest.mark.timeout(120)
def test_connections_beyond_the_cap_get_503_at_once(capped) -> None:
    """Finding 6: 20,000 half-open connections exhausted file descriptors. Past the cap a new
    connection is answered 503 at once, before it sends anything, and closed; a flood of them is
    a few log lines; once the holders leave, the server serves again."""
    guarded = capped
    refused = guarded.counters.connections_refused
    storm = LogStormFilter(interval_s=60, burst=3)
    lines: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = lines.append  # type: ignore[method-assign]
    handler.addFilter(storm)
    logging.getLogger("studio.limits.connections").addHandler(handler)
    try:
        with HeldSockets(port_of(guarded), CAP, opening=b"GET /health HTTP/1.1\r\nHost: x\r\n", reopen=False):
            _wait_for(lambda: guarded.counters.connections_open >= CAP, "the holders to connect")
            with socket.create_connection(("127.0.0.1", port_of(guarded)), timeout=WAIT_S) as extra:
                reply = read_reply(extra, WAIT_S)  # nothing sent: the answer comes unasked
            assert reply.startswith(b"HTTP/1.1 503") and b"too_many_connections" in reply, reply[:300]
            assert b"retry-after: 2" in reply.lower()
            with HeldSockets(port_of(guarded), 300, reopen=False) as flood:
                _wait_for(lambda: flood.closed_by_server >= 300, "the flood to be answered")
            assert flood.refused_503 == 300 and flood.failures == 0
    finally:
        logging.getLogger("studio.limits.connections").removeHandler(handler)
    assert guarded.counters.connections_refused - refused == 301
    refusals = [r for r in lines if "connection cap" in r.getMessage()]
    assert 1 <= len(refusals) <= storm.burst, len(refusals)
    assert storm.dropped_total >= 290
    _wait_for(lambda: guarded.counters.connections_open < CAP, "the holders to be gone")
    assert httpx.get(guarded.url + "/ping", timeout=WAIT_S).json() == {"ok": True}


def test_log_storm_filter_passes_a_few_lines_per_cause_per_interval() -> None:
    now = [0.0]
    storm = LogStormFilter(interval_s=10, burst=2, clock=lambda: now[0])

    def record(msg: str, level: int = logging.WARNING) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", level, __file__, 1, msg, None, None)

    passed = [storm.filter(record("Invalid HTTP request received.")) for _ in range(1000)]
    assert passed[:2] == [True, True] and not any(passed[2:])
    assert storm.filter(record("another cause"))  # another cause has its own budget
    assert storm.filter(record("boom", logging.CRITICAL))  # never hidden
    now[0] = 10.5
    summary = record("Invalid HTTP request received.")
    assert storm.filter(summary) and "998 similar messages suppressed" in summary.getMessage()
    assert storm.dropped_total == 998


def test_a_key_in_a_logged_url_is_redacted():
    import logging

    from studio.limits.logstorm import KeyRedactor

    record = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, '%s - "WebSocket %s" [accepted]',
                               ("127.0.0.1:5", "/tts/websocket?api_key=s3cret&cartesia_version=2025-04-16"), None)
    assert KeyRedactor().filter(record)
    assert record.getMessage() == ('127.0.0.1:5 - "WebSocket /tts/websocket?api_key=[redacted]'
                                   '&cartesia_version=2025-04-16" [accepted]')
