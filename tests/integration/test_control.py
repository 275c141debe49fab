"""The control plane on a real database and real files: signals with their events and
wake, the loop's recursive finish (which never heals), the latch, the pause reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal import control
from fractal.domain.signals import Signal
from fractal.domain.states import Move, Status
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from fractal.tree import Tree


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(repo=tmp_path / "repo", root="main")


@pytest.fixture
def ledger(tree: Tree) -> Iterator[Ledger]:
    tree.data_dir.mkdir(parents=True)
    yield Ledger(tree.db_path)
    close_engines()


def _node(tree: Tree, ledger: Ledger, branch: str, status: str, *, run: bool = True) -> None:
    ledger.register_node(branch, parent=branch.rpartition(".")[0] or None, title=None,
                         worktree=None, status=status)
    tree.node(branch).node_dir.mkdir(parents=True, exist_ok=True)
    if run:
        ledger.open_run(branch, agent=None, max_cost=None, parent_run_id=None)


def _sql(ledger: Ledger, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(ledger.db_path) as conn:
        return conn.execute(query).fetchall()


def test_write_signal_queues_row_and_event_and_wakes(tree: Tree, ledger: Ledger) -> None:
    _node(tree, ledger, "main.a", "active")
    done = control.write_signal(tree, ledger, "main.a", Signal.PAUSE, actor="operator",
                                reason="lunch\nbreak")
    assert done == control.Signalled("main.a", True, "pause sent to main.a")
    assert _sql(ledger, "SELECT signal, metadata FROM signals") == [("pause", "lunch break")]
    assert _sql(ledger, "SELECT event, actor, status, metadata FROM events") == [
        ("pause", "operator", "completed", "lunch break")]
    assert control.wake_path(tree.node("main.a").node_dir).is_file()


@pytest.mark.parametrize(("status", "include_paused", "ok"), [
    ("paused", False, False), ("paused", True, True), ("idle", True, False),
    ("exited", False, False)])
def test_write_signal_refusals_are_failed_events(tree: Tree, ledger: Ledger, status: str,
                                                 include_paused: bool, ok: bool) -> None:
    _node(tree, ledger, "main.a", status)
    done = control.write_signal(tree, ledger, "main.a", Signal.FINISH, actor="x", reason="",
                                include_paused=include_paused)
    assert done.ok is ok
    events = _sql(ledger, "SELECT status, metadata FROM events")
    if ok:
        assert events == [("completed", "")]
    else:
        assert done.message == f"node main.a is {status}; finish needs an active node"
        assert events == [("failed", f"refused: {done.message}")]
        assert _sql(ledger, "SELECT COUNT(*) FROM signals") == [(0,)]


def test_finish_subtree_deepest_first_paused_included_never_heals(tree: Tree,
                                                                  ledger: Ledger) -> None:
    _node(tree, ledger, "main.lead", "active")
    _node(tree, ledger, "main.lead.a", "active")
    _node(tree, ledger, "main.lead.a.x", "paused")
    _node(tree, ledger, "main.lead.b", "exited", run=False)
    # A child recorded active whose supervisor is gone: a verb would heal it first; the
    # loop's finish must not (no process reaped, no status changed).
    _node(tree, ledger, "main.lead.c", "active")
    ledger.set_supervisor("main.lead.c", 2 ** 22 + 7, 1.0)
    sent = control.finish_subtree(tree, ledger, "main.lead", "subtree cost budget reached")
    assert [(s.branch, s.ok) for s in sent] == [
        ("main.lead.a.x", True), ("main.lead.c", True), ("main.lead.a", True),
        ("main.lead", True)]
    rows = _sql(ledger, "SELECT node, actor, metadata FROM events ORDER BY event_id")
    assert rows[0] == ("main.lead.a.x", "main.lead",
                       "subtree cost budget reached (via finish of main.lead)")
    assert rows[-1] == ("main.lead", "loop", "subtree cost budget reached")
    assert _sql(ledger, "SELECT status FROM nodes WHERE node = 'main.lead.c'") == [("active",)]


def test_latch(tree: Tree) -> None:
    tree.data_dir.mkdir(parents=True)
    assert not control.latched(tree)
    control.set_latch(tree, "")
    assert control.latched(tree)
    assert control.latch_path(tree).read_text() == "paused\n"
    assert control.clear_latch(tree) is True
    assert control.clear_latch(tree) is False


def test_pause_reads(tree: Tree, ledger: Ledger) -> None:
    _node(tree, ledger, "main.a", "active")
    _node(tree, ledger, "main.a.b", "active")
    _node(tree, ledger, "main.a.b.c", "idle", run=False)
    assert not control.pause_pending(ledger, "main.a")
    assert control.paused_ancestor(tree, ledger, "main.a.b.c") is None
    control.write_signal(tree, ledger, "main.a", Signal.PAUSE, actor="operator", reason="")
    assert control.pause_pending(ledger, "main.a") and control.pausing(ledger, "main.a")
    assert control.paused_ancestor(tree, ledger, "main.a.b.c") == "main.a"
    assert ledger.move("main.a.b", Move.PARK).after is Status.PAUSED
    assert not control.pause_pending(ledger, "main.a.b") and control.pausing(ledger, "main.a.b")
    assert control.paused_ancestor(tree, ledger, "main.a.b.c") == "main.a.b"
    assert control.paused_ancestor(tree, ledger, "main.a") is None  # the root never counts
    assert not control.pausing(ledger, "main.ghost")


def test_subtree_order(tree: Tree, ledger: Ledger) -> None:
    for branch in ("main.b", "main.a.z", "main.a", "main.ab"):
        _node(tree, ledger, branch, "idle", run=False)
    assert control.subtree(ledger, "main.a", tree) == ["main.a.z"]
    assert control.subtree(ledger, "main", tree) == ["main.a", "main.ab", "main.b", "main.a.z"]
