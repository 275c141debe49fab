"""The dashboard's one-line notification of a merge's outcome (``tui.verbs.merge_line``)."""

from __future__ import annotations

import pytest

from fractal.lifecycle.merge.squash import MergeResult
from fractal.tui.verbs import merge_line

NOTHING = "nothing new to merge: main already holds all of main.c's work"


@pytest.mark.parametrize(("result", "line"), [
    (MergeResult("main.c", "main", "merged", "0123456789abcdef", 2),
     "merged main.c into main: 0123456789 (2 file(s))"),
    (MergeResult("main.c", "main", "nothing", notices=(NOTHING,)), NOTHING),
    (MergeResult("main.c", "main", "nothing", notices=(NOTHING, "main.c has 1 uncommitted "
                                                       "file(s)")),
     f"{NOTHING}; main.c has 1 uncommitted file(s)"),
    (MergeResult("main.c", "main", "nothing"), NOTHING),
    (MergeResult("main.c", "main", "handed-back", conflicts=("a.py",), rearmed=True),
     "handed the conflict back to main.c (re-armed to resolve them); conflicting file(s): "
     "a.py"),
])
def test_merge_line_says_each_thing_once(result: MergeResult, line: str) -> None:
    assert merge_line(result) == line
