"""``domain.conflicts.adds_conflict_markers``: a change gains a conflict hunk only when a
fence line of the hunk is one the change adds."""

from __future__ import annotations

import pytest

from fractal.domain.conflicts import DIFF_LINE_CAP, adds_conflict_markers

HUNK = "<<<<<<< HEAD\nx = 1\n=======\nx = 2\n>>>>>>> main\n"

CASES = [
    ("a new file with a hunk", None, HUNK, True),
    ("a new file without one", None, "plain\n", False),
    ("a lone rule is no hunk", None, "Title\n=======\n", False),
    ("the hunk was there already", HUNK, HUNK, False),
    ("lines added around an old hunk", HUNK, "intro\n" + HUNK + "outro\n", False),
    ("a second hunk added", HUNK, HUNK + "\n" + HUNK, True),
    ("fences added around an old rule", "Title\n=======\n",
     "<<<<<<< a\nTitle\n=======\n>>>>>>> b\n", True),
    ("a fence line changed", HUNK, HUNK.replace(">>>>>>> main", ">>>>>>> other"), True),
    ("the hunk removed", HUNK, "x = 1\n", False),
    ("CRLF line ends", None, HUNK.replace("\n", "\r\n"), True),
    ("binary content", None, "\0" + HUNK, False),
    ("an old binary file", "\0bin", HUNK, True),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_adds_conflict_markers(old: str | None, new: str, expected: bool) -> None:
    assert adds_conflict_markers(None if old is None else old.encode(), new.encode()) \
        is expected


def test_past_the_line_cap_every_hunk_counts_as_added() -> None:
    old = HUNK + "x\n" * DIFF_LINE_CAP
    assert adds_conflict_markers(old.encode(), (old + "y\n").encode()) is True
