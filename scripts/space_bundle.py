"""Write the files of a Hugging Face Space for this app into a folder (then `git push` it, or
`huggingface-cli upload`): the app's tracked files, and requirements-spaces.txt as the Space's
requirements.txt (the Hub installs that one name; ours keeps torch inside ZeroGPU's range).

    python scripts/space_bundle.py /tmp/my-space
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# What the running Space needs; tests, benches and their records stay in this repository.
APP_PARTS = ("app.py", "README.md", "pyproject.toml", "tts_core/", "studio/", "static/")
SPACE_REQUIREMENTS = "requirements-spaces.txt"


def app_files(root: Path = REPO_ROOT) -> list[str]:
    """The tracked files of the app's parts, as git lists them (nothing untracked or ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", *APP_PARTS], cwd=root, check=True,
                            capture_output=True).stdout.decode().split("\0")
    return sorted(name for name in listed if name)


def write_bundle(out: Path, root: Path = REPO_ROOT) -> list[str]:
    """Copy the app's files into `out` (empty but for a .git, or absent); returns the names written."""
    if out.exists() and any(entry.name != ".git" for entry in out.iterdir()):
        raise SystemExit(f"{out} is not empty: give an empty folder, a new one or a fresh clone of the Space")
    names = app_files(root)
    for name in names:
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    shutil.copy2(root / SPACE_REQUIREMENTS, out / "requirements.txt")
    return [*names, "requirements.txt"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="an empty or new folder (e.g. a clone of the Space)")
    names = write_bundle(parser.parse_args().out)
    print(f"wrote {len(names)} files")


if __name__ == "__main__":
    main()
