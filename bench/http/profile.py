"""Where the server's time goes during one run of `bench/http/load.py`: py-spy, from outside.

`profiled(pid, py_spy, path)` records the server process with py-spy (every thread, active samples
only, as collapsed stacks) while the `with` block runs, and stops it with SIGINT (py-spy then writes
its file). `summarize(path)` turns those stacks into shares of the samples: per thread role (the
event loop: the main thread; the stream pumps; the engine; other) and the frames where most samples
were taken, overall and per role. Used for the extra profiled runs of `--profile`, whose figures
are not part of the levels (the sampling costs the server a little). py-spy leaves out most idle
threads but not every blocked wait: a thread waiting on a lock or queue can still be counted.

    python bench/http/profile.py server.pyspy      # the summary of a file, as JSON
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOP = 25


@contextmanager
def profiled(pid: int, py_spy: str, path: Path, rate: int = 67, idle: bool = False) -> Iterator[dict]:
    """Yields a dict that gets py-spy's exit status and the end of its messages once it stopped.
    `idle`: waiting threads are sampled too (where the engine thread waits, not only where it runs)."""
    process = subprocess.Popen([py_spy, "record", "--pid", str(pid), "--threads", "--nonblocking", "--rate", str(rate),
                                *(["--idle"] if idle else []),
                                "--format", "raw", "--duration", "3600", "--output", str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # py-spy attaches
    status: dict = {}
    try:
        yield status
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        status.update(returncode=process.returncode, messages=err.decode(errors="replace")[-500:])


def _role(frames: list[str]) -> str:
    joined = ";".join(frames)
    if "MainThread" in frames[0]:
        return "event loop"
    if "stream_pump.py" in joined or "pump_threads.py" in joined:
        return "stream pumps"
    if "/engine/" in joined or "tts-engine" in frames[0]:
        return "engine"
    return "other"


def summarize(path: Path) -> dict:
    """Shares of the active samples: per role, and the top frames (self time) overall and per role."""
    total = 0
    roles: collections.Counter[str] = collections.Counter()
    top: collections.Counter[str] = collections.Counter()
    per_role: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames, n = stack.split(";"), int(count)
        role = _role(frames)
        total += n
        roles[role] += n
        top[frames[-1]] += n
        per_role[role][frames[-1]] += n

    def shares(counter: collections.Counter[str], limit: int) -> dict[str, float]:
        return {key: round(value / total, 4) for key, value in counter.most_common(limit)} if total else {}

    return {"samples": total, "roles": shares(roles, 10), "top_frames": shares(top, TOP),
            "top_frames_by_role": {role: shares(counter, 12) for role, counter in per_role.items()}}


if __name__ == "__main__":
    print(json.dumps(summarize(Path(sys.argv[1])), indent=1))
