"""The GPU suite's compile warm-up: one `warm_compile.py` process per LM step unit, started right
after collection, each filling torch.compile's on-disk caches with its unit. The tests marked
`compiles` wait for them (`Warmup.wait`), then build their compiled runner from the caches; the
other GPU tests run meanwhile. A warm-up that fails costs only time: the runner then compiles the
unit itself, and the terminal summary says so."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from support.folders import child_env
from tts_core.model.lm_step import StepUnits

WARM_COMPILE = Path(__file__).resolve().parent / "warm_compile.py"
UNITS = tuple(unit.name for unit in fields(StepUnits))  # every unit of the step, one process each
# Inductor's compile workers per warm-up process (its default is one per core, in each process).
COMPILE_THREADS = "4"
WAIT_S = 900


@dataclass
class Warmup:
    started: float
    procs: dict[str, subprocess.Popen]
    logs: dict[str, Path]
    finished: dict[str, tuple[int, float]] = field(default_factory=dict)  # unit -> (exit code, seconds)

    def wait(self) -> None:
        """Until every process has exited (each one's exit time is noted as it happens)."""
        deadline = time.monotonic() + WAIT_S
        while len(self.finished) < len(self.procs) and time.monotonic() < deadline:
            for unit, proc in self.procs.items():
                if unit not in self.finished and proc.poll() is not None:
                    self.finished[unit] = proc.returncode, time.monotonic() - self.started
            time.sleep(0.2)
        self.kill()

    def kill(self) -> None:
        for unit, proc in self.procs.items():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                self.finished.setdefault(unit, (proc.returncode, time.monotonic() - self.started))

    def report(self) -> list[str]:
        lines = []
        for unit in self.procs:
            code, seconds = self.finished.get(unit, (None, float("nan")))
            line = f"{unit}: exit {code} after {seconds:.1f} s"
            if code != 0:
                tail = self.logs[unit].read_text(errors="replace").strip().splitlines()[-1:] if self.logs[unit].is_file() else []
                line += f" ({tail[0][:200] if tail else 'no output'}): that unit was compiled in the test process"
            lines.append(line)
        return lines


def start(lm_config: Path, num_slots: int, max_rows: int) -> Warmup:
    logs_dir = Path(tempfile.mkdtemp(prefix="compile-warmup-"))
    env = child_env(PYTHONUNBUFFERED="1", TORCHINDUCTOR_COMPILE_THREADS=COMPILE_THREADS)
    procs, logs = {}, {}
    for unit in UNITS:
        logs[unit] = logs_dir / f"{unit}.log"
        with logs[unit].open("w") as log:
            procs[unit] = subprocess.Popen([sys.executable, str(WARM_COMPILE), str(lm_config), str(num_slots),
                                            str(max_rows), unit], stdout=subprocess.DEVNULL, stderr=log, env=env)
    return Warmup(time.monotonic(), procs, logs)
