"""Every document the code and docs cite is in the repository, with the section they cite.

A citation is a Markdown path followed by section marks, `docs/spec/LM.md §4.4` or
`(docs/spec/CODEC.md §3.5 encode, §4.1 decode)` or `§4.2-4.4`; a later mark on the same line
belongs to the last path before it. The path is read from the repository root (or from the citing
file's folder), and each cited number must be a heading of that document (`## 4.4 ...`); in a
Markdown file, a mark with no path before it is a section of the file itself. Also
refused: a section mark with no document before it on its line (`TOOLCHAIN §3`), a document
named in capitals with an appendix id (`CONTRACTS A.3`), and a `docs/...md` path that does not exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tts_core", "studio", "static", "tests", "bench", "scripts", "docs", ".ci")
SUFFIXES = {".py", ".js", ".mjs", ".html", ".css", ".md", ".sh", ".toml", ".txt", ".yml", ".yaml"}
SKIPPED = ("tests/assets", "bench/results", "tests/fixtures")
# Documents that another part of the current issue adds: mentioning them is allowed while they are
# missing, and checked like any other once they exist. Remove an entry when its document lands.
PENDING: set[str] = set()

DOC = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
MARK = re.compile(r"§\s*(\d+(?:\.\d+)*)(?:\s*[-–]\s*(\d+(?:\.\d+)*))?")
DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md)\b")
NAMED_APPENDIX = re.compile(r"(?<![\w/.-])([A-Z][A-Z_]{3,})\s+(?:§\s*\d|[A-Z](?:\.\d+)*\b(?![\w-]))")
HEADING = re.compile(r"^#{1,6}\s+§?\s*(\d+(?:\.\d+)*)\.?(?:\s|$)")


@dataclass(frozen=True)
class Problem:
    where: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def scanned_files(root: Path) -> list[Path]:
    files = [p for p in root.glob("*") if p.is_file() and p.suffix in SUFFIXES | {".py"}]
    for top in SCANNED:
        base = root / top
        if base.is_dir():
            files += [p for p in base.rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    own = Path(__file__).resolve()
    return sorted(
        p for p in files
        if not p.name.endswith(".min.js") and p.resolve() != own
        and not any(p.relative_to(root).as_posix().startswith(s) for s in SKIPPED)
    )


def sections(doc: Path) -> set[str]:
    """Section numbers of a Markdown document's headings ("1", "4.4", ...)."""
    found = set()
    for line in doc.read_text(encoding="utf-8").splitlines():
        match = HEADING.match(line)
        if match:
            found.add(match.group(1))
    return found


def resolve(root: Path, citing: Path, name: str) -> Path | None:
    for base in (root, citing.parent):
        path = (base / name).resolve()
        if path.is_file() and path.is_relative_to(root.resolve()):
            return path
    return None


def line_problems(root: Path, path: Path, number: int, line: str, cache: dict) -> list[Problem]:
    where = f"{path.relative_to(root).as_posix()}:{number}"
    problems = []
    docs = [(m.start(), m.group(1)) for m in DOC.finditer(line)]
    for mark in MARK.finditer(line):
        before = [name for at, name in docs if at < mark.start()]
        if not before and path.suffix == ".md":  # a Markdown file's own sections
            before = [path.name]
        if not before:
            problems.append(Problem(where, f"section mark {mark.group(0)!r} names no document: "
                                           f"cite it as docs/<file>.md §n"))
            continue
        name = before[-1]
        doc = resolve(root, path, name)
        if doc is None:
            problems.append(Problem(where, f"{name} §{mark.group(1)}: no such document in the repository"))
            continue
        if doc not in cache:
            cache[doc] = sections(doc)
        for number_ in filter(None, mark.groups()):
            if number_ not in cache[doc]:
                problems.append(Problem(where, f"{name} has no section {number_}"))
    for match in DOCS_PATH.finditer(line):
        name = match.group(1)
        if name not in PENDING and resolve(root, path, name) is None:
            problems.append(Problem(where, f"{name}: no such document in the repository"))
    for match in NAMED_APPENDIX.finditer(line):
        problems.append(Problem(where, f"{match.group(0)!r} cites a document that is not in the repository "
                                       f"by name: cite a path (docs/<file>.md §n)"))
    return problems


def citation_problems(root: Path) -> list[Problem]:
    cache: dict[Path, set[str]] = {}
    problems = []
    for path in scanned_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            problems += line_problems(root, path, number, line, cache)
    return problems


def test_every_citation_resolves_inside_the_repository():
    problems = citation_problems(ROOT)
    assert not problems, f"{len(problems)} citations do not resolve:\n" + "\n".join(map(str, problems))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


SPEC = "# Spec\n\n## 1. One\n\n### 1.2 Two\n\n## 4. Four\n\n### 4.4 Four four\n"


def test_a_good_citation_passes(tmp_path):
    root = _tree(tmp_path, {
        "docs/spec/LM.md": SPEC,
        "tts_core/a.py": '"""Rows (docs/spec/LM.md §4.4, §1.2); see §1 of docs/spec/LM.md §1-1.2."""\n',
        "docs/other.md": "As docs/spec/LM.md §4 says; a sibling: spec/LM.md §4.4.\n",
    })
    assert citation_problems(root) == []


def test_each_kind_of_broken_citation_is_reported(tmp_path):
    root = _tree(tmp_path, {
        "docs/spec/LM.md": SPEC,
        "tts_core/a.py": (
            "# LM.md §4.4 outside the repo's docs\n"               # a document that is not there
            "# docs/spec/LM.md §4.4, §5.1\n"                       # a section that is not there
            "# mounted last (TOOLCHAIN §3)\n"                      # a mark with no document
            "# frames of CONTRACTS A.3 and CONTRACTS D: pushes\n"  # a document by name only
            "# see docs/MISSING.md\n"                              # a docs path that does not exist
        ),
    })
    found = [str(p) for p in citation_problems(root)]
    assert found == [
        "tts_core/a.py:1: LM.md §4.4: no such document in the repository",
        "tts_core/a.py:2: docs/spec/LM.md has no section 5.1",
        "tts_core/a.py:3: section mark '§3' names no document: cite it as docs/<file>.md §n",
        "tts_core/a.py:3: 'TOOLCHAIN §3' cites a document that is not in the repository by name: "
        "cite a path (docs/<file>.md §n)",
        "tts_core/a.py:4: 'CONTRACTS A.3' cites a document that is not in the repository by name: "
        "cite a path (docs/<file>.md §n)",
        "tts_core/a.py:4: 'CONTRACTS D' cites a document that is not in the repository by name: "
        "cite a path (docs/<file>.md §n)",
        "tts_core/a.py:5: docs/MISSING.md: no such document in the repository",
    ]
