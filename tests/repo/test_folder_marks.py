"""Folder-wide marks (`support.folders`): every test of e2e/, reliability/ and gpu/ carries its
folder's marks, and a folder that `-m` deselects whatever else a test is marked is not imported."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.folders import FOLDER_MARKS, deselects_folder

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("markexpr", "skipped"), [
    ("not e2e and not slow", {"e2e", "reliability"}),
    ("not e2e", {"e2e"}),
    ("not slow", {"reliability"}),
    ("not gpu", {"gpu"}),
    ("e2e", set()),  # a test elsewhere may be marked e2e too, and these folders' tests may carry more marks
    ("e2e or gpu", set()),
    ("slow and not e2e", {"e2e"}),
    ("", set()),
])
def test_a_folder_is_skipped_only_when_no_test_of_it_can_be_selected(markexpr, skipped):
    got = {name for name in (*FOLDER_MARKS, "unit", "web") if deselects_folder(markexpr, TESTS / name)}
    assert got == skipped


def test_every_marked_folder_exists_and_its_conftest_marks_it():
    for name in FOLDER_MARKS:
        assert "mark_folder(items, HERE)" in (TESTS / name / "conftest.py").read_text()


def test_the_folders_tests_carry_the_marks(request):
    """This session's collected tests under e2e/, reliability/ and gpu/ carry their folder's marks."""
    for item in request.session.items:
        parts = Path(item.path).relative_to(TESTS).parts
        for mark in FOLDER_MARKS.get(parts[0], ()):
            assert item.get_closest_marker(mark) is not None, (item.nodeid, mark)
