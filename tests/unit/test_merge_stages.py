"""The conflicted-file records of ``git merge-tree --write-tree -z``, as a hand-back lays
them into a child's index."""

from __future__ import annotations

import pytest

from fractal.domain.merge.conflicts import parse_stages

SHA = "a" * 40


@pytest.mark.parametrize(("records", "expected"), [
    ([], []),
    ([""], []),
    ([f"100644 {SHA} 1\tlog.txt", f"100644 {SHA} 2\tlog.txt", f"100644 {SHA} 3\tlog.txt"],
     [("100644", SHA, "1", "log.txt"), ("100644", SHA, "2", "log.txt"),
      ("100644", SHA, "3", "log.txt")]),
    ([f"100755 {SHA} 2\tbin/run me", "", "messages follow"],  # stops at the empty record
     [("100755", SHA, "2", "bin/run me")]),
    ([f"100644 {SHA} 3\tdir/tab\there"], [("100644", SHA, "3", "dir/tab\there")]),
])
def test_parse_stages(records: list[str], expected: list[tuple[str, str, str, str]]) -> None:
    assert parse_stages(records) == expected


@pytest.mark.parametrize("record", [f"100644 {SHA}\tlog.txt", f"100644 {SHA} 0\tlog.txt",
                                    f"100644 {SHA} 2 log.txt"])
def test_a_malformed_record_is_an_error(record: str) -> None:
    with pytest.raises(ValueError, match="not a merge-tree conflict record"):
        parse_stages([record])
