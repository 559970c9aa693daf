"""The one environment reader: below the entry points nothing reads the environment but `tts_core/env.py`.

Read from the source with `ast`: any `os.environ.get(...)`, `os.environ[...]` load, `os.getenv(...)` or
`"X" in os.environ` outside `env.py` fails. Entry points may still *set* defaults before heavy imports
(`os.environ.setdefault`, an assignment), which is not a read of a switch.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READER = ROOT / "tts_core" / "env.py"


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def environment_reads(source: str) -> list[int]:
    """Line numbers of the environment reads in `source` (see the module doc)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, name = node.func.value, node.func.attr
            if _is_environ(owner) and name in ("get", "copy", "items", "keys", "values", "pop"):
                lines.append(node.lineno)
            if isinstance(owner, ast.Name) and owner.id == "os" and name == "getenv":
                lines.append(node.lineno)
        subscript = isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load)
        membership = isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators)
        if subscript or membership:
            lines.append(node.lineno)
    return sorted(lines)


def test_the_scan_sees_every_kind_of_read():
    source = ("import os\na = os.environ.get('A')\nb = os.getenv('B')\nc = os.environ['C']\nd = 'D' in os.environ\n"
              "os.environ['E'] = '1'\nos.environ.setdefault('F', '1')\n")
    assert environment_reads(source) == [2, 3, 4, 5]


def test_nothing_in_the_package_reads_the_environment_but_the_reader():
    offenders = [f"{path.relative_to(ROOT)}:{line}"
                 for package in ("tts_core", "studio") for path in sorted((ROOT / package).rglob("*.py")) if path != READER
                 for line in environment_reads(path.read_text(encoding="utf-8"))]
    assert offenders == [], f"read these through tts_core/env.py: {offenders}"


def test_retired_switches_are_gone_from_the_code():
    retired = ("TTS_NO_CUDA_GRAPH", "TTS_NO_COMPILE", "TTS_NO_STEP_AHEAD", "TTS_NO_SPLIT_READOUT",
               "TTS_NO_ENGINE_PREPARE", "TTS_NO_FUSED_KERNELS")
    hits = [f"{path.relative_to(ROOT)}: {name}" for path in sorted((ROOT / "tts_core").rglob("*.py"))
            for name in retired if name in path.read_text(encoding="utf-8")]
    assert hits == []
