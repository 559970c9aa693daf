"""Constants and small helpers shared by the reliability fixtures (reliability_helpers) and tests."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import soundfile as sf

# app_proc's engine (`bench.lib.app.launch_app`): PROC_MAX_ACTIVE streams decoded together,
# PROC_MAX_QUEUE more may wait, the rest get 503.
from bench.lib.app import PROC_MAX_ACTIVE, PROC_MAX_QUEUE  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts"
SAMPLES_PER_FRAME = 3840  # per channel, 80 ms at 48 kHz

# inproc's limits
INPROC_MAX_TEXT = 500
INPROC_MAX_UPLOAD = 256 * 1024
INPROC_MAX_REF_S = 30.0
INPROC_FETCH_TIMEOUT_S = 2.0


def wav_bytes(samples: np.ndarray, sample_rate: int, *, fmt: str = "WAV", subtype: str = "PCM_16") -> bytes:
    """[n] or [n, C] float samples -> an audio file's bytes."""
    out = io.BytesIO()
    sf.write(out, samples, sample_rate, format=fmt, subtype=subtype)
    return out.getvalue()


def run_coro(coro):
    """Run a coroutine to completion on a fresh event loop in its own thread.

    The browser tests keep Playwright's sync API (and its event loop) alive in the main thread for
    the whole session, so `asyncio.run` there would refuse to start.
    """
    import asyncio
    import threading

    box: dict = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="test-event-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


# ---- answers ----------------------------------------------------------------------------------

FORBIDDEN_IN_RESPONSES = ("Traceback", 'File "', "site-packages", "/work/", str(REPO_ROOT), " object at 0x")


def b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def assert_clean(text: str, data_dir: Path) -> None:
    """No stack trace, object repr or internal path in a response body."""
    for needle in (*FORBIDDEN_IN_RESPONSES, str(data_dir), "tiny_lm", "tiny_codec"):
        assert needle not in text, f"{needle!r} leaked in: {text[:500]}"


def error_of(response) -> dict:
    """The OpenAI error object of a 4xx/5xx response (asserting its shape)."""
    assert response.headers.get("content-type", "").startswith("application/json"), response.text[:200]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], error
    return error


def port_of(server) -> int:
    return int(server.url.rsplit(":", 1)[1])
