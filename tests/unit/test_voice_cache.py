"""The on-disk cache of encoded voices: get/put by key, bad files, bad keys, unwritable folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.voice_helpers import make_bank

from tts_core.voices import CodeCache


def test_put_then_get_returns_read_only_int64_codes(tmp_path: Path) -> None:
    cache, key = CodeCache(tmp_path / "codec"), "a" * 64
    assert key not in cache and cache.get(key) is None
    codes = (np.arange(3 * 16, dtype=np.int32) % 1024).reshape(3, 16)
    cache.put(key, codes)
    assert key in cache and (tmp_path / "codec" / f"{key}.npy").is_file()
    stored = cache.get(key)
    assert stored.dtype == np.int64 and not stored.flags.writeable
    np.testing.assert_array_equal(stored, codes)
    assert [p.name for p in (tmp_path / "codec").iterdir()] == [f"{key}.npy"]  # no temporary left


@pytest.mark.parametrize("content", [b"not an npy file", "out of range"])
def test_unreadable_or_invalid_entries_are_dropped(tmp_path: Path, content) -> None:
    cache, key = CodeCache(tmp_path), "b" * 64
    path = tmp_path / f"{key}.npy"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        np.save(path, np.full((2, 16), 5000, dtype=np.int64))
    assert cache.get(key) is None
    assert not path.exists()


@pytest.mark.parametrize("key", ["../../etc/passwd", "a" * 63, "/" + "a" * 63, "A" * 64, "a" * 64 + "/.."])
def test_keys_must_be_hex_digests(tmp_path: Path, key: str) -> None:
    cache = CodeCache(tmp_path)
    with pytest.raises(ValueError, match="bad cache key"):
        cache.get(key)
    with pytest.raises(ValueError, match="bad cache key"):
        cache.put(key, np.zeros((1, 16), dtype=np.int64))
    with pytest.raises(ValueError, match="bad cache key"):
        _ = key in cache
    assert list(tmp_path.iterdir()) == []


def test_unwritable_folder_is_logged_not_raised(tmp_path: Path, caplog) -> None:
    (tmp_path / "taken").write_bytes(b"a file where the folder should be")
    cache, key = CodeCache(tmp_path / "taken" / "codec"), "c" * 64
    cache.put(key, np.zeros((1, 16), dtype=np.int64))
    assert "could not cache voice codes" in caplog.text
    assert cache.get(key) is None


@pytest.mark.parametrize("fingerprint", ["../up", "..", ".", "a/b", "", "x" * 200])
def test_codec_fingerprint_cannot_escape_the_cache(tmp_path: Path, fingerprint: str) -> None:
    with pytest.raises(ValueError, match="codec_fingerprint"):
        make_bank(tmp_path, codec_fingerprint=fingerprint)
