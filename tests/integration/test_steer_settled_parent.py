"""A verb named for a settled parent still reaches its live children: the parent is
reported as skipped, the children are signalled, and the command succeeds (it used to
print an error and exit 1 after signalling them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.domain.signals import Signal
from fractal.lifecycle.context import open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.steering.signal import Refused, send
from fractal.lifecycle.trees import init_tree
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import copy_of_tree, force_status, make_repo


def _build(repo: Path) -> None:
    make_repo(repo)
    init_tree(repo)
    init_node(open_context(repo), "lead", {"title": "lead"})
    init_node(open_context(repo / ".worktrees" / "main.lead"), "a", {"title": "a"})


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """``main.lead`` and its child ``main.lead.a``, built by the verbs once per test
    process and copied for each test."""
    yield copy_of_tree(tmp_path / "repo", "settled-lead-a", _build)
    close_engines()


@pytest.mark.parametrize("signal", [Signal.STOP, Signal.FINISH, Signal.PAUSE])
def test_a_settled_parent_is_skipped_and_its_live_child_signalled(repo: Path,
                                                                  signal: Signal) -> None:
    db = repo / ".fractal" / "main" / "fractal.db"
    ledger = Ledger(db)
    run = ledger.open_run("main.lead.a", agent="stub", max_cost=None, parent_run_id=None)
    force_status(db, "main.lead", "completed")
    force_status(db, "main.lead.a", "active")
    results = send(open_context(repo), "lead", signal)
    by_node = {r.branch: r.ok for r in results}
    assert by_node == {"main.lead.a": True, "main.lead": False}
    assert [s.signal for s in ledger.signals(run)] == [signal.value]


def test_a_settled_node_without_live_children_is_still_refused(repo: Path) -> None:
    force_status(repo / ".fractal" / "main" / "fractal.db", "main.lead", "completed")
    with pytest.raises(Refused, match="completed"):
        send(open_context(repo), "lead", Signal.STOP)  # its child is idle: nothing to reach
