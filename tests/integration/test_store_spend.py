"""Spend reads: a run's subtree through parent_run_id, deleted nodes, depth limits, unpriced
counts (seed: "Cost ceilings"; ref §4.7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.errors import StoreError
from fractal.store import spend
from fractal.store.ledger import Ledger

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses


def _step(ledger: Ledger, node: str, run: int, iter_id: int | None, cost: float | None, *,
          launched: bool = True) -> int:
    step = ledger.open_step(node=node, run_id=run, iter_id=iter_id, step=1, step_name="S",
                            agent="x", model=None, session="s" if launched else None)
    if launched:
        ledger.set_step_process(step, 4242, 1.0)
    if cost is not None:
        ledger.set_step_cost(step, cost)
    ledger.close_step(step, "completed", 0, "")
    return step


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, int], dict[str, int]]:
    """main.a (run A) > main.a.b (run B, chained) > main.a.b.c (run C, chained); main.a.d
    (run D, started while main.a was idle: not chained); main.x (unrelated). main.a.b is
    deleted from the registry after it ran."""
    db = tmp_path / "fractal.db"
    ledger = Ledger(db)
    runs: dict[str, int] = {}
    iters: dict[str, int] = {}
    for node, parent in (("main.a", None), ("main.a.b", "main.a"), ("main.a.b.c", "main.a.b"),
                         ("main.a.d", None), ("main.x", None)):
        ledger.register_node(node, parent="main", title=None, worktree=None)
        runs[node] = ledger.open_run(node, agent="x", max_cost=None,
                                     parent_run_id=runs[parent] if parent else None)
        iters[node] = ledger.open_iteration(node, runs[node], 1, agent="x", model=None)
    _step(ledger, "main.a", runs["main.a"], iters["main.a"], 1.0)
    _step(ledger, "main.a", runs["main.a"], iters["main.a"], 0.5)
    _step(ledger, "main.a", runs["main.a"], iters["main.a"], None)  # unpriced
    _step(ledger, "main.a", runs["main.a"], iters["main.a"], 0.0, launched=False)  # skipped
    _step(ledger, "main.a.b", runs["main.a.b"], iters["main.a.b"], 2.0)
    _step(ledger, "main.a.b.c", runs["main.a.b.c"], iters["main.a.b.c"], 4.0)
    _step(ledger, "main.a.d", runs["main.a.d"], iters["main.a.d"], 8.0)
    _step(ledger, "main.x", runs["main.x"], iters["main.x"], 16.0)
    ledger.delete_node("main.a.b")
    return db, runs, iters


def test_a_run_spend_chains_descendant_runs_deleted_ones_included(
        tree: tuple[Path, dict[str, int], dict[str, int]]) -> None:
    db, runs, _ = tree
    assert spend.run_spend(db, runs["main.a"]) == spend.Spend(7.5, 4, 1, 6)
    assert spend.run_spend(db, runs["main.a"], max_depth=0).usd == 1.5
    assert spend.run_spend(db, runs["main.a"], max_depth=1).usd == 3.5
    assert spend.run_spend(db, runs["main.a.b"]).usd == 6.0
    assert spend.run_spend(db, 999) == spend.Spend()


def test_node_spends_follow_the_branch_prefix(
        tree: tuple[Path, dict[str, int], dict[str, int]]) -> None:
    db, _, _ = tree
    parts = {p.node: p.spend.usd for p in spend.node_spends(db, "main.a")}
    assert parts == {"main.a": 1.5, "main.a.b": 2.0, "main.a.b.c": 4.0, "main.a.d": 8.0}
    assert {p.node for p in spend.node_spends(db, "main.a", max_depth=1)} == {
        "main.a", "main.a.b", "main.a.d"}
    assert sum(p.spend.usd for p in spend.node_spends(db, None)) == 31.5
    assert {p.node for p in spend.node_spends(db, None, max_depth=1)} == {
        "main.a", "main.x"}
    by_node = {p.node: p.spend.usd for p in spend.run_node_spends(tree[0], tree[1]["main.a"])}
    assert by_node == {"main.a": 1.5, "main.a.b": 2.0, "main.a.b.c": 4.0}


def test_iteration_and_step_reads(tree: tuple[Path, dict[str, int], dict[str, int]]) -> None:
    db, runs, iters = tree
    assert spend.iteration_spend(db, iters["main.a"]) == spend.Spend(1.5, 2, 1, 4)
    assert spend.last_iteration_id(db, "main.a") == iters["main.a"]
    assert spend.last_iteration_id(db, "main.a", runs["main.x"]) is None
    assert spend.last_step_spend(db, "main.a") == spend.Spend(0.0, 0, 0, 1)
    assert spend.last_step_spend(db, "main.x").usd == 16.0
    assert spend.last_step_spend(db, "main.none") == spend.Spend(0.0, 0, 0, 0)


@pytest.mark.parametrize(("spent", "untracked"), [
    (spend.Spend(0.0, 0, 3, 3), True),
    (spend.Spend(0.0, 0, 0, 2), False),  # nothing launched: $0, not untracked
    (spend.Spend(1.0, 1, 3, 4), False),
])
def test_untracked(spent: spend.Spend, untracked: bool) -> None:
    assert spent.untracked is untracked


@pytest.mark.sqlite_only("a file that is not a database is SQLite's case")
def test_a_read_of_a_broken_file_is_a_store_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot read database"):
        spend.run_spend(bad, 1)


def test_the_loops_probe_reads_the_run_and_the_iteration_in_one_statement(
        tree: tuple[Path, dict[str, int], dict[str, int]]) -> None:
    db, runs, iters = tree
    got = spend.run_and_iteration_spend(db, runs["main.a"], iters["main.a"])
    assert got == (spend.Spend(7.5, 4, 1, 6), spend.Spend(1.5, 2, 1, 4))
    assert got == (spend.run_spend(db, runs["main.a"]), spend.iteration_spend(db, iters["main.a"]))
    assert spend.run_and_iteration_spend(db, runs["main.x"], None) == (
        spend.Spend(16.0, 1, 0, 1), spend.Spend())
    assert spend.run_and_iteration_spend(db, 999, 999) == (spend.Spend(), spend.Spend())
