"""What the benches' command lines share: the shared data folder and its files as defaults."""

from __future__ import annotations

from pathlib import Path

from tts_core.env import env_str

REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """The shared MOSS-TTS-Nano data folder: $MOSS_TTS_PARITY_DIR, default ../shared/moss_tts_nano_data
    beside the repository."""
    return Path(env_str("MOSS_TTS_PARITY_DIR") or REPO_ROOT.parent / "shared" / "moss_tts_nano_data")


def default_config_path(*parts: str) -> str | None:
    """A file of the shared data folder (`shared_data_dir`), or None when it is not there."""
    path = shared_data_dir().joinpath(*parts)
    return str(path) if path.is_file() else None
