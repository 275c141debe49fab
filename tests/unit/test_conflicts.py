"""The pure conflict rules: conflict-marker hunks, the refusal reason, merge-tree output."""

from __future__ import annotations

import pytest

from fractal.domain.merge.conflicts import (
    ConflictPair,
    Operation,
    conflict_reason,
    has_conflict_markers,
    parse_merge_tree,
    skipped_notice,
)

HUNK = b"a\n<<<<<<< HEAD\nx = 1\n=======\nx = 2\n>>>>>>> main.lead\nb\n"


@pytest.mark.parametrize(("data", "expected"), [
    (HUNK, True),
    (HUNK.replace(b"\n", b"\r\n"), True),
    (b"<<<<<<<\n=======\n>>>>>>>\n", True),
    (b"<<<<<<< ours\n||||||| base\nold\n=======\n>>>>>>> theirs\n", True),
    (b"Title\n=======\n\ntext\n", False),
    (b"<<<<<<< HEAD\nonly an opener\n", False),
    (b"=======\n<<<<<<< a\n>>>>>>> b\n", False),
    (b"<<<<<<<< eight\n=======\n>>>>>>>> eight\n", False),
    (b"\0" + HUNK, False),
    (b"", False),
    (b"x = '<<<<<<< HEAD'\n", False),
])
def test_conflict_markers(data: bytes, expected: bool) -> None:
    assert has_conflict_markers(data) is expected


@pytest.mark.parametrize(("paths", "operation", "expected"), [
    (["calc/ops.py"], None, "unresolved merge conflict in calc/ops.py"),
    (["a", "b", "a"], Operation.MERGE, "unresolved merge conflict in a, b"),
    ([], Operation.MERGE, "unresolved merge in progress"),
    ([], Operation.REBASE, "unresolved rebase in progress"),
    ([str(i) for i in range(12)], None,
     "unresolved merge conflict in 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 ... and 2 more"),
])
def test_conflict_reason(paths: list[str], operation: Operation | None, expected: str) -> None:
    assert conflict_reason(paths, operation) == expected


@pytest.mark.parametrize(("output", "ignore", "tree", "conflicts"), [
    ("abc123\0", (), "abc123", ()),
    ("abc123\0f\0f\0g\0", (), "abc123", ("f", "g")),
    ("abc123\0.fractal/main.a/NODE.md\0calc/ops.py\0", (".fractal",), "abc123",
     ("calc/ops.py",)),
    ("abc123\0.fractalx\0", (".fractal",), "abc123", (".fractalx",)),
])
def test_parse_merge_tree(output: str, ignore: tuple[str, ...], tree: str,
                          conflicts: tuple[str, ...]) -> None:
    parsed = parse_merge_tree(output, ignore=ignore)
    assert (parsed.tree, parsed.conflicts, parsed.clean) == (tree, conflicts, not conflicts)


def test_parse_merge_tree_without_a_tree_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_merge_tree("")


def test_conflict_pair() -> None:
    assert ConflictPair("a", "b", ("f",)).conflicts
    assert not ConflictPair("a", "b").conflicts


@pytest.mark.parametrize(("skipped", "compared", "expected"), [
    ((), True, ""),
    ((("main.a", "nothing"),), False,
     "every child of main skipped, nothing of it left to collide (no work to merge: a)"),
    ((("main.a", "merged"), ("main.b", "nothing")), True,
     "2 children of main skipped, nothing of them left to collide (already merged: a; "
     "no work to merge: b)"),
    ((("main.a", "branch"), ("main.b", "merged"), ("main.c", "merged")), True,
     "3 children of main skipped, nothing of them left to collide (already merged: b, c; "
     "no branch: a)"),
])
def test_skipped_notice_says_why_each_child_was_left_out(
        skipped: tuple[tuple[str, str], ...], compared: bool, expected: str) -> None:
    assert skipped_notice("main", skipped, compared=compared) == expected
