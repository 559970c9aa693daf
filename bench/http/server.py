"""The server side of `python -m bench.http.load`: `python app.py` as users start it, measured from outside.

`serve` starts the app (`bench.lib.app`) on a model (the tiny parity checkpoints, or full-size checkpoints such as
`python -m tts_core make-random-checkpoint` writes), on CPUs of its own when asked (the load
generator then runs on the others), and `ServedApp` reads what the bench needs: health, the encode
counters of `/metrics`, and the process's CPU time split by thread from `/proc` (psutil):

- `event_loop_s`: the main thread, where uvicorn's event loop runs (every response's bytes pass
  through it: when it nears one CPU second per second, the loop is the bottleneck);
- `ended_threads_s` (reported as the pumps'): the stream pump threads, which read the engine's
  chunks and encode them: threads the operating system knows as "stream-pump" (the server's pool,
  `studio/pump_threads.py`), and threads that ended during the run (a server that starts one
  thread per stream);
- `other_threads_s`: the rest: the engine, its codec thread, torch's workers;
- `children_s`: the server's child processes (the encoder workers of `--encoder-processes`),
  counted in `total_s` too.

Works for any version of the server (nothing inside it is asked), so two checkouts can be compared.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from bench.lib.app import REPO_ROOT, AppProcess, app_env, app_process, free_port


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """The checkpoints, tokenizer and preset clips a server (and the in-process bench) loads."""

    lm: str
    codec: str
    tokenizer: str
    voices_dir: str
    label: str  # for the record: "tiny parity checkpoints", "full-size random weights", ...

    @classmethod
    def tiny(cls, data: Path) -> ModelFiles:
        return cls(str(data / "parity" / "tiny_lm"), str(data / "parity" / "tiny_codec"),
                   str(data / "hf_checkpoint_meta" / "tokenizer.model"), str(data / "presets"),
                   "tiny parity checkpoints")

    @classmethod
    def full(cls, checkpoint_dir: Path, data: Path) -> ModelFiles:
        """What `python -m tts_core make-random-checkpoint DIR` wrote, with the shared data's tokenizer and clips."""
        return cls(str(checkpoint_dir / "lm"), str(checkpoint_dir / "codec"), str(data / "hf_checkpoint_meta" / "tokenizer.model"),
                   str(data / "presets"), "full-size random weights")


def split_cpus(client_cpus: int) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(server CPUs, client CPUs): the last `client_cpus` of this process's CPUs for the clients.
    0 (or too few CPUs to split): no pinning at all."""
    usable = tuple(sorted(os.sched_getaffinity(0)))
    if client_cpus <= 0 or client_cpus >= len(usable):
        return None, None
    return usable[:-client_cpus], usable[-client_cpus:]


PUMP_THREAD_NAME = "stream-pump"


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    total_s: float
    threads: dict[int, float]  # thread id -> CPU seconds
    main_tid: int
    pumps: frozenset[int] = frozenset()  # ids of the threads named PUMP_THREAD_NAME
    children: dict[int, float] | None = None  # child process id -> CPU seconds (encoder workers)


def _thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return ""


def cpu_snapshot(ps: psutil.Process) -> CpuSnapshot:
    times = ps.cpu_times()
    threads = {t.id: t.user_time + t.system_time for t in ps.threads()}
    pumps = frozenset(tid for tid in threads if _thread_name(ps.pid, tid) == PUMP_THREAD_NAME)
    children = {}
    for child in ps.children(recursive=True):
        try:
            child_times = child.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        children[child.pid] = child_times.user + child_times.system
    return CpuSnapshot(times.user + times.system, threads, ps.pid, pumps, children)


def cpu_split(before: CpuSnapshot, after: CpuSnapshot) -> dict:
    """CPU seconds between two snapshots: total, the event loop's thread, the pumps' (named pump
    threads, and threads that ended), the rest."""
    total = after.total_s - before.total_s
    loop = after.threads.get(after.main_tid, 0.0) - before.threads.get(before.main_tid, 0.0)
    deltas = {tid: cpu - before.threads.get(tid, 0.0) for tid, cpu in after.threads.items() if tid != after.main_tid}
    ended = max(0.0, total - loop - sum(deltas.values()))
    pumps = ended + sum(d for tid, d in deltas.items() if tid in after.pumps)
    children = sum(cpu - (before.children or {}).get(pid, 0.0) for pid, cpu in (after.children or {}).items())
    return {"total_s": total + children, "event_loop_s": loop, "ended_threads_s": pumps,
            "other_threads_s": total - loop - pumps, "children_s": children}


@dataclass
class ServedApp(AppProcess):
    cpus: tuple[int, ...] | None = None

    def scrape(self) -> dict[tuple[str, str], float]:
        """(metric sample name, format label) -> value, for the encode and bytes-out counters."""
        from prometheus_client.parser import text_string_to_metric_families

        wanted = ("tts_encode_seconds_total", "tts_audio_out_seconds_total", "tts_response_bytes_total")
        values: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(httpx.get(self.url + "/metrics", timeout=10).text):
            for sample in family.samples:
                if sample.name in wanted:
                    values[(sample.name, sample.labels.get("format", ""))] = sample.value
        return values

    def cpu(self) -> CpuSnapshot:
        return cpu_snapshot(self.ps)


def app_command(files: ModelFiles, *, max_streams: int, extra_args: tuple[str, ...] = (),
                launcher: tuple[str, ...] = ()) -> list[str]:
    """`python app.py ...`; with `launcher` (e.g. `-m bench.http.stand_in ... --`), python runs that first."""
    return [sys.executable, *launcher, "app.py", "--lm", files.lm, "--codec", files.codec, "--tokenizer", files.tokenizer,
            "--voices-dir", files.voices_dir, "--max-active-streams", str(max_streams), "--max-queue", str(max_streams),
            *extra_args]


@contextmanager
def serve(files: ModelFiles, work: Path, *, max_streams: int, threads: str | None, cpus: tuple[int, ...] | None,
          extra_args: tuple[str, ...] = (), root: Path = REPO_ROOT, extra_env: dict[str, str] | None = None,
          launcher: tuple[str, ...] = ()) -> Iterator[ServedApp]:
    """`python app.py` (from `root`) with its temp dir and voice cache under `work`, pinned to `cpus`;
    stopped on exit. Not yet ready: see `ServedApp.wait_ready`."""
    port = free_port()
    env = app_env(port, work, threads=threads, extra=extra_env)
    log_path = work / "app.log"
    command = app_command(files, max_streams=max_streams, extra_args=extra_args, launcher=launcher)
    with app_process(command, cwd=root, env=env, log_path=log_path, cpus=cpus) as process:
        yield ServedApp(f"http://127.0.0.1:{port}", process, log_path, cpus)
