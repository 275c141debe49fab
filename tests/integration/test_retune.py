"""Live retuning through the library: config get/set, node update, the re-derived reserve,
arming and rolling back a ceiling, and a child's max_cost against its parent (seed:
"Steering a running loop"; ref §1.5, §2.2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fractal.errors import ConfigError, FractalError, InvalidValue
from fractal.lifecycle.context import Refused, open_context
from fractal.lifecycle.retune import arm_max_cost, config_get, config_set, update_node
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.store.ledger import Ledger
from fractal.tree import find_tree
from tests.helpers import copy_of_tree, make_repo


def _build(repo: Path) -> None:
    make_repo(repo)
    init_tree(repo, agent="true", max_depth="unlimited")  # main.n's max_depth stays null
    init_node(open_context(repo), "n", {"max_cost": 10.0, "max_iters": 3})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A tree with node ``main.n``, built by the verbs once per test process and copied."""
    return copy_of_tree(tmp_path / "repo", "retune-n", _build)


def _config(repo: Path, node: str = "main.n") -> dict[str, object]:
    data = json.loads((repo / ".worktrees" / node / ".fractal" / node / "config.json")
                      .read_text())
    assert isinstance(data, dict)
    return data


def _row(repo: Path, node: str = "main.n") -> tuple[object, ...]:
    row = Ledger(repo / ".fractal" / "main" / "fractal.db").node(node)
    assert row is not None
    return row.max_cost, row.max_depth, row.title


def test_config_get_and_set_are_typed_and_echo_changes(repo: Path) -> None:
    wt = repo / ".worktrees" / "main.n"
    assert config_get(open_context(wt), "max_cost") == 10.0 and config_get(open_context(wt), "model") is None
    # the operator sets the node's keys either way (--node); the node itself only tightens
    done = config_set(open_context(repo), ["max_iters=7", "step_timeout=10m", "sync=false",
                                           "scope=src,docs/"], node="n")
    assert [c.line for c in done.changes] == [
        "max_iters: 3 -> 7", 'step_timeout: null -> "10m"', "sync: true -> false",
        'scope: [] -> ["src", "docs"]']
    assert config_set(open_context(repo), ["max_iters=null"], node="n").changes[0].line == \
        "max_iters: 7 -> null"
    assert _config(repo)["max_iters"] is None
    assert config_set(open_context(wt), ["max_iters=2", "scope=src"]).changes[0].line == \
        "max_iters: null -> 2"
    with pytest.raises(InvalidValue, match="unknown config key 'nope'"):
        config_get(open_context(wt), "nope")


@pytest.mark.parametrize(("assignments", "problem"), [
    (["root=x"], "root: is immutable"),
    (["parent=main"], "parent: is immutable"),
    (["user=true"], "user: is immutable"),
    (["max_iters=0"], "max_iters: must be a whole number >= 1"),
    (["step_timeout=10"], "step_timeout"),
    (["max_step_cost=20"], "max_step_cost: must be <= max_cost"),
    (["max_cost=null", "reserve_budget=1"], "reserve_budget: requires max_cost"),
    (["nonsense"], "write KEY=VALUE"),
])
def test_config_set_refuses_and_writes_nothing(repo: Path, assignments: list[str],
                                               problem: str) -> None:
    before = _config(repo)
    with pytest.raises(ConfigError, match=problem):
        config_set(open_context(repo / ".worktrees" / "main.n"), ["max_iters=5", *assignments])
    assert _config(repo) == before


def test_config_set_on_the_root(repo: Path) -> None:
    done = config_set(open_context(repo), ["model=m1"])
    assert done.branch is None and [c.line for c in done.changes] == ['model: null -> "m1"']


def test_update_writes_config_and_registry_and_rederives_the_reserve(repo: Path) -> None:
    assert _config(repo)["reserve_budget"] == 1.0
    done = update_node(open_context(repo), "n", {"max_cost": "4", "title": "hi", "max_depth": "2",
                                   "max_step_cost": None})
    assert [c.line for c in done.changes] == [
        "max_cost: 10.0 -> 4.0", 'title: null -> "hi"', "max_depth: null -> 2",
        "reserve_budget: 1.0 -> 0.4"]
    assert _row(repo) == (4.0, 2, "hi")
    update_node(open_context(repo), "n", {"reserve_budget": "25%"})
    assert _config(repo)["reserve_budget"] == 1.0
    update_node(open_context(repo), "n", {"max_cost": "8"})  # a custom reserve is kept
    assert (_config(repo)["max_cost"], _config(repo)["reserve_budget"]) == (8.0, 1.0)
    update_node(open_context(repo), "n", {"max_cost": "null", "reserve_budget": "null"})
    assert _row(repo)[0] is None and _config(repo)["reserve_budget"] is None
    with pytest.raises(InvalidValue, match="nothing to update"):
        update_node(open_context(repo), "n", {"title": None})


def test_arming_a_ceiling_can_be_undone(repo: Path) -> None:
    undo = arm_max_cost(find_tree(repo), "main.n", "2")
    assert (_config(repo)["max_cost"], _config(repo)["reserve_budget"], _row(repo)[0]) == (
        2.0, 0.2, 2.0)
    undo()
    assert (_config(repo)["max_cost"], _config(repo)["reserve_budget"], _row(repo)[0]) == (
        10.0, 1.0, 10.0)


def test_a_child_must_fit_the_parents_remaining_budget(repo: Path) -> None:
    with pytest.raises(FractalError, match=r"give main\.n\.c a --max-cost of at most \$10\.0000"):
        init_node(open_context(repo), "c", {}, parent="n")
    with pytest.raises(FractalError, match=r"--max-cost \$12 does not fit main\.n's remaining"):
        init_node(open_context(repo), "c", {"max_cost": 12.0}, parent="n")
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.n", agent="x", max_cost=10.0, parent_run_id=None)
    step = ledger.open_step(node="main.n", run_id=run, iter_id=None, step=1, step_name="S",
                            agent="x", model=None, session=None)
    ledger.set_step_cost(step, 7.5)
    with pytest.raises(FractalError, match=r"remaining budget \$2\.5000 \(\$10 max, run"):
        init_node(open_context(repo), "c", {"max_cost": 3.0}, parent="n")
    made = init_node(open_context(repo), "c", {"max_cost": 2.5}, parent="n")
    assert made.paths.branch == "main.n.c"
    init_node(open_context(repo), "free", {})  # under the root: no parent budget


def _failed(repo: Path, node: str, verb: str) -> list[str]:
    """The reasons of the failed ``verb`` events recorded on ``node``."""
    return [str(row[0]) for row in _sql(repo, "SELECT metadata FROM events WHERE node = ? "
                                        "AND event = ? AND status = 'failed'", node, verb)]


def _sql(repo: Path, query: str, *params: object) -> list[tuple[object, ...]]:
    import sqlite3

    with sqlite3.connect(repo / ".fractal" / "main" / "fractal.db") as conn:
        return list(conn.execute(query, params))


@pytest.mark.parametrize(("assignments", "key"), [
    (["max_cost=null"], "max_cost"),
    (["max_cost=20"], "max_cost"),
    (["max_iters=9"], "max_iters"),
    (["exit_check=true"], "exit_check"),
    (["scope=src", "max_iters=1"], None),  # a tightening passes
])
def test_a_node_may_only_tighten_its_own_config(repo: Path, assignments: list[str],
                                                key: str | None) -> None:
    wt = repo / ".worktrees" / "main.n"
    before = _config(repo)
    if key is None:
        config_set(open_context(wt), assignments)
        assert _config(repo) != before
        return
    with pytest.raises(Refused, match=rf"main\.n may only tighten its own limits: {key} "):
        config_set(open_context(wt), assignments)
    assert _config(repo) == before  # nothing written
    (why,) = _failed(repo, "main.n", "config")
    assert why.startswith("refused: main.n may only tighten") and "the operator at the root" in why


def test_update_of_itself_is_held_to_the_same_rule(repo: Path) -> None:
    wt = repo / ".worktrees" / "main.n"
    with pytest.raises(Refused, match="may only tighten its own limits: max_cost would raise"):
        update_node(open_context(wt), "n", {"max_cost": "50"})
    assert _row(repo)[0] == 10.0 and _config(repo)["max_cost"] == 10.0
    assert update_node(open_context(wt), "n", {"max_cost": "5"}).changes[0].line == \
        "max_cost: 10.0 -> 5.0"
    with pytest.raises(Refused, match="may only tighten"):
        arm_max_cost(find_tree(repo), "main.n", "8", open_context(wt))
    assert _config(repo)["max_cost"] == 5.0


def test_a_retune_moves_the_open_runs_recorded_ceiling(repo: Path) -> None:
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.n", agent="x", max_cost=10.0, parent_run_id=None)
    update_node(open_context(repo), "n", {"max_cost": "25"})  # the operator raises it
    recorded = ledger.run(run)
    assert recorded is not None and recorded.max_cost == 25.0
    config_set(open_context(repo / ".worktrees" / "main.n"), ["max_cost=3"])  # itself lowers
    recorded = ledger.run(run)
    assert recorded is not None and recorded.max_cost == 3.0
