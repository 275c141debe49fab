"""The dashboard's spend gauge on a real tree: a node's figure is its run's subtree spend,
the same as ``fractal node cost spent NODE --run``, and unknown stays unknown."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from fractal.tree import find_tree
from fractal.tui.snapshot import Builder, Snapshot
from tests.helpers import force_status, make_repo
from tests.trees import run_cli

NOW = 2_000_000_000.0


def _fractal(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), repo, check=False)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    repo = make_repo(tmp_path / "repo")
    for args in (["init"], ["node", "init", "lead"], ["node", "init", "add", "--parent",
                 "main.lead"], ["node", "init", "items"],
                 ["node", "init", "w1", "--parent", "main.items"],
                 ["node", "init", "w2", "--parent", "main.items"]):
        done = _fractal(repo, *args)
        assert done.returncode == 0, done.stderr
    yield repo
    close_engines()


def _cli_spent(repo: Path, node: str) -> str:
    done = _fractal(repo, "node", "cost", "spent", node, "--run")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _spent(snap: Snapshot, branch: str) -> float | None:
    view = snap.node(branch)
    assert view is not None
    return view.spent


def test_the_gauge_shows_the_subtree_spend_against_the_subtree_cap(repo: Path) -> None:
    tree = find_tree(repo)
    ledger = Ledger(tree.db_path)
    kept = Builder(tree)

    def step(node: str, run: int, cost: float | None, *, close: bool = True) -> int:
        sid = ledger.open_step(node=node, run_id=run, iter_id=None, step=1, step_name="WORK",
                               agent="stub", model=None, session=None)
        if close:
            ledger.close_step(sid, "completed", 0, "", cost=cost)
        return sid

    lead = ledger.open_run("main.lead", agent="stub", max_cost=5.0, parent_run_id=None)
    force_status(tree.db_path, "main.lead", "active")
    step("main.lead", lead, 0.23)
    add = ledger.open_run("main.lead.add", agent="stub", max_cost=1.0, parent_run_id=lead)
    step("main.lead.add", add, 0.21)
    ledger.close_run(add, "completed", 0, "Reached max iterations (1)")
    force_status(tree.db_path, "main.lead.add", "completed")
    # A pool: its own run launches no step; its workers spend under it.
    items = ledger.open_run("main.items", agent="stub", max_cost=2.0, parent_run_id=None)
    force_status(tree.db_path, "main.items", "active")
    w1 = ledger.open_run("main.items.w1", agent="stub", max_cost=None, parent_run_id=items)
    w2 = ledger.open_run("main.items.w2", agent="stub", max_cost=None, parent_run_id=items)
    for worker in ("main.items.w1", "main.items.w2"):
        force_status(tree.db_path, worker, "active")
    flight = step("main.items.w2", w2, None, close=False)  # in flight: no cost yet

    snap = kept.build(now=NOW)
    assert _cli_spent(repo, "main.lead") == "$0.4400"
    assert _spent(snap, "main.lead") == pytest.approx(0.44)  # its child's spend counts
    view = snap.node("main.lead")
    assert view is not None and view.cap == 5.0
    assert _spent(snap, "main.lead.add") == pytest.approx(0.21)
    assert _spent(snap, "main.items") is None  # nothing priced in its subtree: unknown
    assert _spent(snap, "main.items.w1") is None

    step("main.items.w1", w1, 0.5)  # a worker's cost lands
    snap = kept.build(now=NOW)
    assert _cli_spent(repo, "main.items") == "$0.5000"
    assert _spent(snap, "main.items") == pytest.approx(0.5)
    ledger.close_step(flight, "completed", 0, "", cost=0.25)
    ledger.close_run(w2, "completed", 0, "Reached max iterations (1)")
    force_status(tree.db_path, "main.items.w2", "completed")
    snap = kept.build(now=NOW)
    assert _cli_spent(repo, "main.items") == "$0.7500"
    assert _spent(snap, "main.items") == pytest.approx(0.75)
    # the kept builder (ended runs summed once) agrees with one built from scratch
    assert snap.nodes == Builder(tree).build(now=NOW).nodes
