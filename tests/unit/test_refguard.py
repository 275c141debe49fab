"""The branch-ref rule around a sandboxed launch (``fractal.domain.refguard``)."""

from __future__ import annotations

import pytest

from fractal.domain.refguard import (
    STALE_LOCK_AGE,
    RefText,
    last_logged,
    packed_branches,
    read_ref,
    repair_of,
    restore_recorded,
    stale_lock,
)

SHA = "a" * 40
OTHER = "b" * 40


@pytest.mark.parametrize(("text", "expected"), [
    (f"{SHA}\n", RefText(SHA, "")),
    ("c" * 64, RefText("c" * 64, "")),  # a sha-256 repository
    ("ref: refs/heads/main.b\n", RefText("", "refs/heads/main.b")),
    ("ref:refs/heads/main.b", RefText("", "refs/heads/main.b")),
    ("0" * 39, RefText("", "")),  # broken
    ("A" * 40, RefText("", "")),  # git writes lower case only
    ("", RefText("", "")),
])
def test_read_ref(text: str, expected: RefText) -> None:
    assert read_ref(text) == expected


def test_packed_branches() -> None:
    text = (f"# pack-refs with: peeled fully-peeled sorted\n{SHA} refs/heads/main\n"
            f"{OTHER} refs/heads/main.a\n^{SHA}\n{SHA} refs/tags/v1\nbroken refs/heads/x\n")
    assert packed_branches(text) == {"main": SHA, "main.a": OTHER}


@pytest.mark.parametrize(("branch", "found", "own_before", "expected"), [
    ("main.a", RefText(SHA, ""), SHA, None),  # a sha: left (pinned by the bind)
    ("main.a", RefText("", "refs/heads/main.b"), OTHER, OTHER),  # own, symbolic: set back
    ("main.a", RefText("", "refs/heads/main.b"), None, None),  # own, sha unknown: never deleted
    ("main.zzz", RefText("", "refs/heads/main.b"), OTHER, ""),  # another, symbolic: deleted
    ("main", RefText("", "refs/heads/main.a"), OTHER, ""),
    ("main.b", RefText("", ""), OTHER, None),  # broken, not symbolic: left (doctor names it)
])
def test_repair_of(branch: str, found: RefText, own_before: str | None,
                   expected: str | None) -> None:
    assert repair_of(branch, found, "main.a", own_before) == expected


@pytest.mark.parametrize(("branch", "found", "new", "known", "expected"), [
    ("main.zzz", RefText(SHA, ""), True, False, ""),  # a squat on a future node: deleted
    ("feature", RefText(SHA, ""), True, False, None),  # the agent's own `checkout -b`: left
    ("mainly", RefText(SHA, ""), True, False, None),  # not a node's name either
    ("main.zzz", RefText(SHA, ""), True, True, None),  # a node made meanwhile: left
    ("main.zzz", RefText(SHA, ""), False, False, None),  # there before the launch: left
    ("main.a", RefText(SHA, ""), True, False, None),  # its own branch: never deleted
    ("main.zzz", RefText("", "refs/heads/main.b"), True, True, ""),  # symbolic: always
])
def test_repair_of_a_branch_made_during_the_launch(
        branch: str, found: RefText, new: bool, known: bool, expected: str | None) -> None:
    assert repair_of(branch, found, "main.a", OTHER, new=new, known=known,
                     root="main") == expected


@pytest.mark.parametrize(("age", "new", "expected"), [
    (0.0, True, True),  # appeared during the launch: every process of it has ended
    (0.0, False, False),  # there before it: a git update of someone else, in flight
    (STALE_LOCK_AGE - 1, False, False),
    (STALE_LOCK_AGE, False, True),  # left behind
])
def test_stale_lock(age: float, new: bool, expected: bool) -> None:
    assert stale_lock(age, new=new) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("", None),
    (f"{'0' * 40} {SHA} Op <o@x> 1 +0000\tcommit (initial): x\n", SHA),
    (f"{'0' * 40} {SHA} Op <o@x> 1 +0000\tclone\n"
     f"{SHA} {OTHER} Op <o@x> 2 +0000\tcommit: y\n", OTHER),
    (f"{SHA} {OTHER} Op <o@x> 2 +0000\tcommit: y\ntruncated", OTHER),  # a partial last line
    ("garbage\n", None),
])
def test_last_logged(text: str, expected: str | None) -> None:
    assert last_logged(text) == expected


@pytest.mark.parametrize(("found", "recorded", "advance", "expected"), [
    (RefText(OTHER, ""), SHA, False, SHA),  # moved by someone else: set back
    (RefText(SHA, ""), SHA, False, None),  # where its worktree left it
    (RefText(OTHER, ""), SHA, True, None),  # fractal's merge-base advance: same content
    (RefText(OTHER, ""), None, False, None),  # nothing recorded: left
    (RefText("", "refs/heads/x"), SHA, False, None),  # symbolic: repair_of's
    (RefText("", ""), SHA, False, None),  # broken
])
def test_restore_recorded(found: RefText, recorded: str | None, advance: bool,
                          expected: str | None) -> None:
    assert restore_recorded(found, recorded, advance=advance) == expected
