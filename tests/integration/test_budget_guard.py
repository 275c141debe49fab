"""The loop's cost guard against a real database: last good spend reads, reserve entry, the
launch budget and the landing (seed: "Cost ceilings"; ref §4.7, bug ledger #13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.agents.claude import ClaudeBackend
from fractal.agents.command import CommandBackend
from fractal.domain.budget.ceilings import Landing
from fractal.domain.config import NodeConfig
from fractal.runtime.budgetguard import BudgetGuard
from fractal.runtime.context import Boot, RunState
from fractal.store import spend
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths, Tree
from tests.fakes import RecordingReporter

NODE = "main.g"


def _guard(tmp_path: Path, config: NodeConfig, *, enforcing: bool = False
           ) -> tuple[BudgetGuard, Ledger, RecordingReporter]:
    tree = Tree(repo=tmp_path, root="main")
    paths = NodePaths(tree=tree, branch=NODE, worktree=tmp_path / ".worktrees" / NODE)
    ledger = Ledger(tree.db_path)
    ledger.register_node(NODE, parent="main", title=None, worktree=str(paths.worktree),
                         status="active", caps={"max_cost": config.max_cost})
    backend = ClaudeBackend() if enforcing else CommandBackend(["true"], tmp_path)
    boot = Boot(paths=paths, config=config, agent_setting="x", backend=backend,
                continue_mode=False, resume_mode=False, launch_env={})
    run = ledger.open_run(NODE, agent="x", max_cost=config.max_cost, parent_run_id=None)
    state = RunState(run_id=run, live=config, iteration=1)
    state.iter_id = ledger.open_iteration(NODE, run, 1, agent="x", model=None)
    reporter = RecordingReporter()
    return BudgetGuard(boot, state, ledger, reporter), ledger, reporter


def _spend(guard: BudgetGuard, ledger: Ledger, usd: float) -> None:
    step = ledger.open_step(node=NODE, run_id=guard.state.run_id, iter_id=guard.state.iter_id,
                            step=1, step_name="S", agent="x", model=None, session="s")
    ledger.set_step_process(step, 1, 1.0)
    ledger.set_step_cost(step, usd)
    ledger.close_step(step, "completed", 0, "")
    guard.stale()  # as the end of a launch does


def test_probes_of_one_launch_share_a_reading(tmp_path: Path) -> None:
    guard, ledger, _ = _guard(tmp_path, NodeConfig(max_cost=1.0))
    _spend(guard, ledger, 0.25)
    assert guard.run_spent() == 0.25
    step = ledger.open_step(node=NODE, run_id=guard.state.run_id, iter_id=guard.state.iter_id,
                            step=2, step_name="T", agent="x", model=None, session="s")
    ledger.set_step_cost(step, 0.5)
    assert guard.run_spent() == 0.25  # the same launch's probes: one read
    guard.after_launch(guard.boot.backend, "T", 0.5, True)
    assert guard.run_spent() == 0.75  # a launch ended: read again


def test_a_failed_read_holds_the_last_good_figure_and_warns_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guard, ledger, reporter = _guard(tmp_path, NodeConfig(max_cost=1.0))
    _spend(guard, ledger, 0.75)
    assert guard.run_spent() == 0.75
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database" * 200)
    real = spend.run_and_iteration_spend

    def read_broken(_db: Path, run_id: int | None, iter_id: int | None) -> object:
        return real(broken, run_id, iter_id)

    # the spend reads now meet a file that is no database; the ledger's writes still work
    monkeypatch.setattr(spend, "run_and_iteration_spend", read_broken)
    guard.stale()
    assert guard.run_spent() == 0.75
    guard.stale()
    assert guard.run_spent() == 0.75
    assert guard.launch(guard.boot.backend, None, None).usd == pytest.approx(0.15)
    warnings = [ln for ln in reporter.lines if "holding the last good figure" in ln]
    assert len(warnings) == 1
    assert ledger.events_of(NODE, guard.state.run_id, ["budget"])[0].meta.startswith(
        "could not read the run's spend")


def test_a_failed_first_read_counts_zero_never_the_full_cap(tmp_path: Path) -> None:
    guard, ledger, _ = _guard(tmp_path, NodeConfig(max_cost=1.0))
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database" * 200)
    ledger.db_path = broken
    assert guard.run_spent() == 0.0


@pytest.mark.parametrize(("enforcing", "label", "flag"), [
    (False, "$0.6000 remaining of $1 (max $0.5/iter) (warn $0.2/step)", None),
    (True, "$0.6000 remaining of $1 (max $0.5/iter) (max $0.2/step)", 0.1),
])
def test_the_launch_budget(tmp_path: Path, enforcing: bool, label: str,
                           flag: float | None) -> None:
    config = NodeConfig(max_cost=1.0, max_iter_cost=0.5, max_step_cost=0.2, reserve_budget=0.1)
    guard, ledger, _ = _guard(tmp_path, config, enforcing=enforcing)
    _spend(guard, ledger, 0.4)
    launch = guard.launch(guard.boot.backend, None, None)
    # min(1 - 0.4 - 0.1, 0.5 - 0.4, 0.2)
    assert (launch.usd, launch.label, launch.skip) == (0.1, label, False)
    _spend(guard, ledger, 0.6)
    assert guard.launch(guard.boot.backend, None, None).skip


def test_reserve_entry_and_the_mid_iteration_ceiling(tmp_path: Path) -> None:
    guard, ledger, _ = _guard(tmp_path, NodeConfig(max_cost=1.0, max_iter_cost=0.5))
    assert guard.before_step(first=True, finish_pending=False) is None
    assert not guard.state.reserve
    _spend(guard, ledger, 0.5)
    assert guard.before_step(first=False, finish_pending=False) is None
    assert guard.state.reserve  # the iteration cap is spent
    _spend(guard, ledger, 0.5)
    assert guard.before_step(first=True, finish_pending=False) is None  # no check at step 1
    over = guard.before_step(first=False, finish_pending=False)
    assert over == "subtree cost budget reached (spent $1.0000 >= $1 max)"
    assert guard.state.budget.reason == over
    finish = [s for s in ledger.signals(guard.state.run_id) if s.signal == "finish"]
    assert [s.meta for s in finish] == [over]  # the run signalled its own finish
    assert guard.landing().reason == over


def test_iteration_top_resets_reserve_and_heals_the_registry(tmp_path: Path) -> None:
    guard, ledger, reporter = _guard(tmp_path, NodeConfig(max_cost=1.0, step_timeout=60))
    guard.state.reserve = True
    guard.state.live = NodeConfig(max_cost=2.0, max_depth=3, step_timeout=60, title="t")
    assert guard.iteration_top() is False
    row = ledger.node(NODE)
    assert row is not None and (row.max_cost, row.max_depth, row.title) == (2.0, 3, "t")
    assert not guard.state.reserve
    healed = [ln for ln in reporter.lines if "healed the registry" in ln]
    assert len(healed) == 2 and "registry max_cost 1.0 differs from config.json 2.0" in healed[0]
    assert not [ln for ln in reporter.lines if "no timeout is set" in ln]


def test_a_deliberate_finish_during_the_wind_down_completes_with_the_overshoot(
        tmp_path: Path) -> None:
    guard, ledger, _ = _guard(tmp_path, NodeConfig(max_cost=1.0))
    _spend(guard, ledger, 0.6)
    _spend(guard, ledger, 0.6)
    assert guard.at_boundary()  # past the ceiling: the budget finish went out
    ledger.add_signal(NODE, guard.state.run_id, "finish", "requirements verified")
    guard.state.finish_drained = True
    assert guard.landing() == Landing(
        None, "cost budget exceeded in finish wind-down (spent $1.2000 >= $1 max)")
    assert guard.figures() == "spent $1.2000 of $1 max"


def test_the_exit_figures_of_a_run_whose_steps_all_lack_a_cost_read_unknown(
        tmp_path: Path) -> None:
    guard, ledger, _ = _guard(tmp_path, NodeConfig(max_cost=1.0))
    ledger.book_closed_step(node=NODE, run_id=guard.state.run_id, iter_id=guard.state.iter_id,
                            step=1, step_name="CHECK", status="completed", exit_code=0,
                            reason="", cost=0.0)  # never launched: a known $0
    step = ledger.open_step(node=NODE, run_id=guard.state.run_id, iter_id=guard.state.iter_id,
                            step=2, step_name="S", agent="x", model=None, session=None)
    ledger.set_step_process(step, 1, 1.0)
    ledger.close_step(step, "exited", 3, "")  # launched, no cost reported
    guard.stale()
    assert guard.figures() == "spent unknown of $1 max"
    _spend(guard, ledger, 0.25)
    assert guard.figures() == "spent $0.2500 of $1 max"  # the known part
