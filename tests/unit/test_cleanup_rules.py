"""domain/cleanup.py: every refusal rule of retire, unretire, delete, reset and destroy."""

from __future__ import annotations

import pytest

from fractal.domain.cleanup import (
    NodeFacts,
    authority_refusal,
    deepest_first,
    delete_refusal,
    is_missing,
    restored_status,
    retire_refusal,
    tree_refusal,
    unretire_refusal,
)

B = "main.a"


def facts(status: str = "completed", **kw: object) -> NodeFacts:
    return NodeFacts(branch=B, status=status, target="main", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("node", "force", "expected"), [
    (facts(), False, None),
    (facts("idle"), False, None),
    (facts("exited"), False, None),
    (facts("active"), False, "is active"),
    (facts("active"), True, "is active"),
    (facts("paused"), True, "is paused"),
    (facts("idle", booting=True), True, "is booting"),
    (facts("retired", worktree_exists=False), False, "already retired"),
    (facts(worktree_exists=False), False, "is missing"),
    (facts(branch_exists=False), False, "is missing"),
    (facts(dirty=("a.txt",)), False, "uncommitted files"),
    (facts(dirty=("a.txt",)), True, None),
])
def test_retire(node: NodeFacts, force: bool, expected: str | None) -> None:
    why = retire_refusal(node, force=force)
    assert (why is None) if expected is None else (why is not None and expected in why)


@pytest.mark.parametrize(("node", "expected"), [
    (facts("retired", worktree_exists=False), None),
    (facts("completed"), "not retired"),
    (facts("retired", worktree_exists=False, branch_exists=False), "branch of retired node"),
])
def test_unretire(node: NodeFacts, expected: str | None) -> None:
    why = unretire_refusal(node)
    assert (why is None) if expected is None else (why is not None and expected in why)


@pytest.mark.parametrize(("node", "force", "expected"), [
    (facts(), False, None),
    (facts("idle"), False, None),
    (facts("retired", worktree_exists=False), False, None),
    (facts(worktree_exists=False, branch_exists=False), False, None),  # missing: deregister
    (facts("active"), True, "is active"),
    (facts("paused"), True, "is paused"),
    (facts("idle", booting=True), True, "is booting"),
    (facts(unmerged=("feat: x",)), False, "1 commit(s) not merged into main"),
    (facts(dirty=("a b.txt",)), False, "1 uncommitted file(s)"),
    (facts(unmerged=("x",), dirty=("y",)), True, None),
])
def test_delete(node: NodeFacts, force: bool, expected: str | None) -> None:
    why = delete_refusal(node, force=force)
    assert (why is None) if expected is None else (why is not None and expected in why)


def test_delete_lists_what_would_be_lost_and_caps_the_list() -> None:
    why = delete_refusal(facts(unmerged=tuple(f"c{i}" for i in range(25)), dirty=("f",)),
                         force=False)
    assert why is not None
    assert "c0" in why and "c19" in why and "c20" not in why and "... and 5 more" in why
    assert "uncommitted file(s):\n  f" in why and "--force" in why


def test_tree_refusal_names_every_live_node() -> None:
    assert tree_refusal([facts(), facts("retired")], "reset") is None
    why = tree_refusal([NodeFacts("main.a", "active"), NodeFacts("main.b", "idle", booting=True),
                        NodeFacts("main.c", "stopped")], "destroy")
    assert why is not None and "2 node(s) still live" in why
    assert "main.a (active)" in why and "main.b (booting)" in why and "main.c" not in why


@pytest.mark.parametrize(("caller", "target", "allowed"), [
    ("main", "main.a", True),
    ("main", "main.a.b", True),
    ("main.a", "main.a.b", True),
    ("main.a", "main.a.b.c", True),
    ("main.a", "main.a", False),
    ("main.a", "main.b", False),
    ("main.a", "main.ab", False),
    ("main.a.b", "main.a", False),
])
def test_authority(caller: str, target: str, allowed: bool) -> None:
    why = authority_refusal(caller, target, "main", "delete")
    assert (why is None) == allowed
    if why:
        assert "only the operator" in why and caller in why


@pytest.mark.parametrize(("node", "missing"), [
    (facts(), False),
    (facts(worktree_exists=False), True),
    (facts(branch_exists=False), True),
    (facts("retired", worktree_exists=False), False),
    (facts("retired", worktree_exists=False, branch_exists=False), True),
])
def test_missing(node: NodeFacts, missing: bool) -> None:
    assert is_missing(node) is missing


def test_deepest_first() -> None:
    assert deepest_first(["main.a", "main.a.b", "main.c", "main.a.b.d", "main.a.b"]) == [
        "main.a.b.d", "main.a.b", "main.a", "main.c"]


@pytest.mark.parametrize(("previous", "restored"), [
    ("completed", "completed"), ("idle", "idle"), ("exited", "exited"), ("killed", "killed"),
    ("stopped", "stopped"), ("active", "idle"), (None, "idle"), ("garbage", "idle"),
    ("retired", "idle"),
])
def test_restored_status(previous: str | None, restored: str) -> None:
    assert restored_status(previous) == restored


@pytest.mark.parametrize(("previous", "reason", "note"), [
    ("completed", None, "was completed"),
    ("exited", "done: merged", "was exited: done: merged"),
])
def test_retire_note_round_trip(previous: str, reason: str | None, note: str) -> None:
    from fractal.domain.cleanup import previous_status, retire_note

    assert retire_note(previous, reason) == note
    assert previous_status(note) == previous


def test_previous_status_of_a_foreign_note() -> None:
    from fractal.domain.cleanup import previous_status

    assert previous_status("refused: x") is None and previous_status("was ") is None


@pytest.mark.parametrize(("previous", "recovered"), [
    ("completed", "completed"), ("retired", "retired"), ("idle", "idle"), (None, "idle"),
    ("active", "idle"), ("missing", "idle"),
])
def test_vanish_note_and_recovered_status(previous: str | None, recovered: str) -> None:
    from fractal.domain.cleanup import previous_status, recovered_status, vanish_note

    if previous is not None:
        assert previous_status(vanish_note(previous, "worktree")) == previous
    assert recovered_status(previous) == recovered
