"""Disk bounds (issue 14, finding 5): Gradio's upload folder and the encoded-voice cache stay within
a file count and a size, least recently used first, whatever clients send. The app's bounds are
lowered for the test (the same objects the running server uses)."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from support.reliability_common import INPROC_MAX_UPLOAD, b64, wav_bytes

from tts_core.voices import CodeCache

pytestmark = pytest.mark.slow

WAIT_S = 30.0


@contextmanager
def lowered(obj, **values):
    old = {name: getattr(obj, name) for name in values}
    for name, value in values.items():
        setattr(obj, name, value)
    try:
        yield obj
    finally:
        for name, value in old.items():
            setattr(obj, name, value)


def _usage(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file() and len(p.parent.name) == 64]
    return len(files), sum(p.stat().st_size for p in files)


@pytest.mark.timeout(300)
def test_gradio_uploads_stay_within_the_folder_bound(inproc, inproc_client, gradio_dir) -> None:
    """5,000 small files (in requests of 500, as one client can) and 30 files just under the
    upload limit: the folder never ends up above its bounds, the newest uploads survive."""
    disk = inproc.app.state.upload_disk
    max_files, max_bytes = 200, 4 * INPROC_MAX_UPLOAD
    with lowered(disk, max_files=max_files, max_bytes=max_bytes):
        for batch in range(10):
            files = [("files", (f"f{batch}-{i}.wav", os.urandom(64), "audio/wav")) for i in range(500)]
            r = inproc_client.post("/gradio_api/upload", files=files)
            assert r.status_code == 200 and len(r.json()) == 500, r.text[:200]
        big = os.urandom(INPROC_MAX_UPLOAD - 1024)
        handles = []
        for index in range(30):
            r = inproc_client.post("/gradio_api/upload", files={"files": (f"big{index}.wav", big[index:] + bytes(index),
                                                                           "audio/wav")})
            assert r.status_code == 200, r.text[:200]
            handles += r.json()
        deadline = time.monotonic() + WAIT_S
        while _usage(gradio_dir)[0] > max_files or _usage(gradio_dir)[1] > max_bytes:
            assert time.monotonic() < deadline, f"upload folder above its bound: {_usage(gradio_dir)}"
            time.sleep(0.1)
        count, size = _usage(gradio_dir)
        assert count <= max_files and size <= max_bytes, (count, size)
        assert inproc_client.get(f"/gradio_api/file={handles[-1]}").status_code == 200  # the newest stays
        assert inproc_client.get(f"/gradio_api/file={handles[0]}").status_code in (403, 404)  # the oldest went
        assert disk.evicted_total >= 5000 + 30 - max_files
    metrics = inproc_client.get("/metrics").text
    assert "tts_gradio_upload_evicted_files_total" in metrics


@pytest.mark.timeout(180)
def test_voice_codes_of_uploaded_clips_stay_within_the_cache_bound(inproc, inproc_client) -> None:
    """Every distinct clip used to leave a code file for good. The cache keeps at most its bound."""
    cache = inproc.synth.voices.code_cache
    rng = np.random.default_rng(5)
    with lowered(cache, max_files=3):
        for index in range(6):
            clip = wav_bytes((rng.standard_normal(24_000) * 0.1).astype(np.float32), 24_000)
            r = inproc_client.post("/api/tts/stream", json={"text": f"Clip {index}.", "max_frames": 1,
                                                            "ref_audio": b64(clip)})
            assert r.status_code == 200, r.text[:300]
            assert len(list(cache.directory.glob("*.npy"))) <= 3
    assert cache.evicted >= 3


def test_code_cache_evicts_least_recently_used_first(tmp_path: Path) -> None:
    cache = CodeCache(tmp_path, max_files=3, max_bytes=None)
    codes = np.zeros((4, 16), np.int64)
    keys = [f"{i:064x}" for i in range(5)]
    for i, key in enumerate(keys[:3]):
        cache.put(key, codes)
        os.utime(tmp_path / f"{key}.npy", (1000 + i, 1000 + i))  # put in this order, long ago
    assert cache.get(keys[0]) is not None  # used now: the most recent
    cache.put(keys[3], codes)
    assert sorted(p.stem for p in tmp_path.glob("*.npy")) == sorted([keys[0], keys[2], keys[3]])
    by_size = CodeCache(tmp_path / "small", max_files=None, max_bytes=3 * 700)
    for key in keys:
        by_size.put(key, np.zeros((40, 16), np.int64))  # 5248 bytes each: over the byte bound alone
    assert [p.stem for p in (tmp_path / "small").glob("*.npy")] == [keys[-1]]  # the newest is always kept
    stale = tmp_path / ".tmp-abandoned.npy"
    stale.write_bytes(b"half a write")
    os.utime(stale, (1, 1))
    cache.put(keys[4], codes)
    assert not stale.exists()
    unbounded = CodeCache(tmp_path / "saved", max_files=None, max_bytes=None)
    for key in keys:
        unbounded.put(key, codes)
    assert len(list((tmp_path / "saved").glob("*.npy"))) == 5
