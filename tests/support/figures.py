"""`scripts/render_figures.py` loaded as a module, once per session (scripts/ is not a package):
the tests of the figures read its renderers, and those of the `figures_*.py` it imports, from it."""

from __future__ import annotations

import functools
import importlib.util
from types import ModuleType

from support.folders import REPO_ROOT


@functools.cache
def render_figures() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_figures", REPO_ROOT / "scripts" / "render_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
