"""The layering of `tts_core`, read from the source with `ast` (nothing is imported or run).

- The engine side never imports the web wing: only `tts_core/__main__.py` (an entry point) and
  `tts_core/web/**` may import `tts_core.web`.
- No import circle among tts_core's modules, counting imports at module level and inside
  functions alike (a function-level import is still a dependency, only a later one).
- Imports only go down: every module sits on a floor (`FLOORS`, by its longest listed prefix) and
  imports only modules of its own floor or lower ones. A new module or package gets a floor here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "tts_core"
# Circles that a change in flight is removing; the entry goes when the circle does.
KNOWN_CYCLES: set[frozenset[str]] = set()
# The floors, lowest first (names under `tts_core.`; "" is the package's own __init__). The engine
# side is floors 0-6; the web wing stacks on it: shared pieces, hardening, bytes, routes, the
# ZeroGPU page relay, the Gradio page, then the wiring.
FLOORS: list[list[str]] = [
    ["env", "errors", "config", "types", "cancel", "cpus"],
    ["devices", "model", "text", "tokenizer", "audio", "tiny", "cli_flags"],
    ["prompt", "voices", "engine"],
    ["cpu_mode", "cpu_mode_cache", "cpu_mode_settle", "jobs", "zerogpu"],
    ["loader"],
    ["synthesizer", "export"],
    ["", "cli"],
    ["web", "web.errors", "web.settings", "web.service", "web.capacity", "web.page_slot"],
    ["web.limits"],
    ["web.delivery"],
    ["web.api"],
    ["web.zerogpu"],
    ["web.ui"],
    ["web.app", "web.main", "web.flags"],
    ["__main__"],
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted((ROOT / PACKAGE).rglob("*.py"))}


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
    """Module -> the tts_core modules it imports (a name inside a module counts as that module)."""
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


def test_the_engine_side_never_imports_the_web_wing() -> None:
    offenders = []
    for name, path in _sources().items():
        if name == f"{PACKAGE}.__main__" or name == f"{PACKAGE}.web" or name.startswith(f"{PACKAGE}.web."):
            continue
        web = sorted(n for n in _imported_names(name, path) if n == f"{PACKAGE}.web" or n.startswith(f"{PACKAGE}.web."))
        if web:
            offenders.append(f"{path.relative_to(ROOT)} imports {', '.join(web)}")
    assert not offenders, "the engine side must not import tts_core.web:\n" + "\n".join(offenders)


def _floor(module: str) -> int | None:
    """The floor of `module`: that of the longest `FLOORS` entry it is, or is inside of."""
    best: tuple[int, int] | None = None  # (prefix length, floor)
    for floor, rooms in enumerate(FLOORS):
        for room in rooms:
            full = f"{PACKAGE}.{room}" if room else PACKAGE
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
    assert "tts_core.web.api.requests" in graph["tts_core.web.app"]
    assert "tts_core.web.limits.netguard" in graph["tts_core.web.limits.ref_audio"]  # `from . import netguard`
    assert "tts_core.web.app" in graph["tts_core.web.main"]  # imported inside main()
    assert _floor("tts_core.web.api.routes") > _floor("tts_core.web.delivery.streaming") > _floor("tts_core.engine.engine")
    assert _floor("tts_core") == _floor("tts_core.cli") and _floor("tts_core.engine.runner") == _floor("tts_core.engine")
    made_up = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set()}
    assert _cycles(made_up) == [{"a", "b", "c"}]
    assert _one_circle(made_up, {"a", "b", "c"}) == ["a", "b", "c", "a"]
