"""The layering of the library (`tts_core`) and the web app (`studio`), read from the source with `ast`.

- The library never imports the web app: `studio` imports `tts_core`, never the reverse, and the
  library imports no web framework (fastapi, starlette, gradio, uvicorn), so it runs without them.
- No import circle, counting imports at module level and inside functions alike (a function-level
  import is still a dependency, only a later one).
- Imports only go down: every module sits on a floor (`FLOORS`, by its longest listed prefix) and
  imports only modules of its own floor or lower ones. A new module or package gets a floor here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tts_core", "studio")
WEB_FRAMEWORKS = ("fastapi", "starlette", "gradio", "uvicorn", "anyio")
# Circles that a change in flight is removing; the entry goes when the circle does.
KNOWN_CYCLES: set[frozenset[str]] = set()
# The floors, lowest first (full module names; a package's name covers its modules). The library
# is the first floors; the web app stacks on it: shared pieces, hardening, bytes, routes, the
# ZeroGPU relay, the Gradio page, then the wiring.
FLOORS: list[list[str]] = [
    ["tts_core.env", "tts_core.errors", "tts_core.devices", "tts_core.config", "tts_core.types"],
    ["tts_core.model", "tts_core.text", "tts_core.tokenizer", "tts_core.audio", "tts_core.tiny"],
    ["tts_core.prompt", "tts_core.voices", "tts_core.engine"],
    ["tts_core.precision", "tts_core.segments"],
    ["tts_core.loader"],
    ["tts_core.synthesizer", "tts_core.export"],
    ["tts_core", "tts_core.cli"],
    ["tts_core.__main__"],
    ["studio", "studio.errors", "studio.settings", "studio.service", "studio.page_slot",
     "studio.zerogpu.env", "studio.zerogpu.quota", "studio.zerogpu.aoti", "studio.zerogpu.harness",
     "studio.zerogpu.worker"],
    ["studio.limits"],
    ["studio.delivery"],
    ["studio.api"],
    ["studio.zerogpu", "studio.zerogpu.relay"],
    ["studio.ui", "studio.zerogpu.page"],
    ["studio.app", "studio.main", "studio.flags"],
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name `path` imports, relative imports resolved, at any depth of the file.

    `from a import b` yields `a.b`: the module `a.b` when there is one, else a name inside `a`.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name inside a module counts as that module)."""
    sources = _sources()
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        edges = set()
        for target in _imported_names(name, path):
            while target and target not in sources:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan): each holds a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _one_circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path a -> b -> ... -> a inside `component`, for the failure message."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = sorted(graph[path[-1]] & component)
        back = [n for n in nxt if n == start]
        if back and len(path) > 1:
            return [*path, start]
        fresh = [n for n in nxt if n not in seen]
        if not fresh:
            return [*path, start]
        path.append(fresh[0])
        seen.add(fresh[0])


def test_the_library_never_imports_the_web_app() -> None:
    offenders = []
    for name, path in _sources().items():
        if not name.startswith("tts_core"):
            continue
        bad = sorted(n for n in _imported_names(name, path) if n.split(".")[0] in ("studio", *WEB_FRAMEWORKS))
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {', '.join(bad)}")
    assert not offenders, "the library must not import the web app or a web framework:\n" + "\n".join(offenders)


def _floor(module: str) -> int | None:
    """The floor of `module`: that of the longest `FLOORS` entry it is, or is inside of."""
    best: tuple[int, int] | None = None  # (prefix length, floor)
    for floor, rooms in enumerate(FLOORS):
        for full in rooms:
            if (module == full or module.startswith(full + ".")) and (best is None or len(full) > best[0]):
                best = (len(full), floor)
    return None if best is None else best[1]


def test_every_module_has_a_floor() -> None:
    missing = sorted(name for name in _sources() if _floor(name) is None)
    assert not missing, "give these modules a floor in FLOORS: " + ", ".join(missing)


def test_imports_only_go_down() -> None:
    upward = []
    for name, targets in sorted(_graph().items()):
        floor = _floor(name)
        for target in sorted(targets):
            if floor is not None and (_floor(target) or 0) > floor:
                upward.append(f"{name} (floor {floor}) imports {target} (floor {_floor(target)})")
    assert not upward, "imports must go down (FLOORS):\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    graph = _graph()
    circles = [_one_circle(graph, c) for c in _cycles(graph) if frozenset(c) not in KNOWN_CYCLES]
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_checks_see_what_they_check() -> None:
    """The graph is built from real imports: a known edge is there, and a made-up circle is found."""
    graph = _graph()
    assert "studio.api.requests" in graph["studio.app"]
    assert "studio.limits.netguard" in graph["studio.limits.ref_audio"]  # `from . import netguard`
    assert "studio.app" in graph["studio.main"]  # imported inside main()
    assert _floor("studio.api.routes") > _floor("studio.delivery.streaming") > _floor("tts_core.engine.engine")
    assert _floor("tts_core") == _floor("tts_core.cli") and _floor("tts_core.engine.runner") == _floor("tts_core.engine")
    made_up = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set()}
    assert _cycles(made_up) == [{"a", "b", "c"}]
    assert _one_circle(made_up, {"a", "b", "c"}) == ["a", "b", "c", "a"]
