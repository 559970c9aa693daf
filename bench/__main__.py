"""`python -m bench`: lists the benches, each run as `python -m bench.GROUP.NAME [--help]`.

A bench is a module of bench/ (outside `bench/lib`) that runs as a program (`if __name__ ==
"__main__"`), or a package's `__main__.py`; its line here is its docstring's first sentence (cut at 100 characters). The
modules are read, not imported, so the list needs none of their dependencies.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _runs_as_program(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)


def benches() -> list[tuple[str, str]]:
    """(module name, summary) of every bench, sorted by name."""
    found = []
    for path in sorted(HERE.rglob("*.py")):
        relative = path.relative_to(HERE.parent).with_suffix("")
        if "lib" in relative.parts or relative.name == "__init__" or path == Path(__file__).resolve():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if relative.name != "__main__" and not _runs_as_program(tree):
            continue
        name = ".".join(relative.parts).removesuffix(".__main__")
        doc = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
        first = re.split(r"(?<=[.?])\s", doc, maxsplit=1)[0]
        found.append((name, first if len(first) <= 100 else first[:99].rstrip() + "…"))
    return sorted(found)


def main() -> int:
    print(__doc__.split("\n\n")[0].removeprefix("`python -m bench`: "))
    rows = benches()
    width = max(len(name) for name, _ in rows)
    for name, doc in rows:
        print(f"  python -m {name:<{width}}  {doc}")
    print("bench/README.md says what each measures and the commands that wrote bench/results/.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
