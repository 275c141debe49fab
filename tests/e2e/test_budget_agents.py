"""Budgets with the claude- and codex-style fakes (an enforcing budget flag, token pricing,
refusals, the price-table preflight) and live retuning of a running node (issue 5; seed:
"The per-step budget", "Pricing and untracked spend", "Steering a running loop")."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import PRICES_FIXTURE
from tests.e2e.conftest import Tree
from tests.e2e.fakes import make_fakes, start_all, step_rows
from tests.helpers import wait_until

pytestmark = pytest.mark.e2e


def _run(tree: Tree, node: str) -> tuple[object, ...]:
    return tree.sql("SELECT status, exit_code, metadata FROM runs WHERE node = ? "
                    "ORDER BY run_id DESC LIMIT 1", f"main.{node}")[0]


def test_claude_gets_the_step_budget_as_a_hard_flag(tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    tree.node("cb", {"01-A.md": "A [fake:claude-max-budget]\n"}, "--agent", "claude",
              "--max-cost", "1", "--max-step-cost", "0.05", "--max-iters", "1", "--no-sync")
    start_all(tree, ["cb"], fakes.env())
    (call,) = fakes.calls("claude")
    argv = call["argv"]
    assert argv[argv.index("--max-budget-usd") + 1] == "0.050000"
    assert call["env"]["STEP_BUDGET"] == "0.05"
    assert call["env"]["COST_BUDGET"] == "$1.0000 remaining of $1 (max $0.05/step)"
    # stopping at its budget is a clean completed step, with the CLI's own figure
    assert [r[:5] for r in step_rows(tree, "cb")] == [("A", "completed", 0, "", 0.0075)]
    assert tree.status("cb") == "completed"


def test_codex_usage_is_priced_from_the_table(tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    tree.node("cx", {"01-A.md": "A [fake:codex-text-only]\n",
                     "02-B.md": "B [fake:codex-resume]\n"},
              "--agent", "codex", "--model", "gpt-fixture", "--max-cost", "1", "--max-iters", "1",
              "--no-sync", "--step-timeout", "1m")
    start_all(tree, ["cx"], fakes.env())
    rows = step_rows(tree, "cx")
    assert [r[1] for r in rows] == ["completed", "completed"]
    # 1000 input tokens at $1/M + 100 output at $10/M; then the resumed launch's own share
    assert rows[0][4] == pytest.approx(0.002) and rows[0][5:8] == (1000, 0, 100)
    assert rows[1][4] is not None and rows[1][4] > 0
    assert tree.cli("node", "cost", "spent", "cx").stdout.strip() != "untracked"


@pytest.mark.parametrize(("model", "refusal"), [
    (None, "a cost cap requires a model"),
    ("gpt-5.5", "model 'gpt-5.5' has no price in the price table"),
])
def test_a_cost_cap_with_an_unpriceable_agent_fails_the_step_at_launch(
        tree: Tree, tmp_path: Path, model: str | None, refusal: str) -> None:
    fakes = make_fakes(tmp_path)
    opts = ["--model", model] if model else []
    tree.node("nx", {"01-A.md": "A [fake:codex-text-only]\n"}, "--agent", "codex", *opts,
              "--max-cost", "1", "--max-iters", "1", "--no-sync")
    start_all(tree, ["nx"], fakes.env())
    ((name, status, code, meta, cost, *_),) = step_rows(tree, "nx")
    assert (name, status, code, cost) == ("A", "failed", 1, 0.0) and meta.startswith(refusal)
    assert fakes.calls("codex") == []  # nothing was launched


def test_pricing_preflight_aborts_without_a_table_and_warns_on_a_stale_one(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    cache = tmp_path / "prices" / "pricing.json"
    missing = {"FRACTAL_PRICING_FILE": str(cache),
               "FRACTAL_PRICING_URL": (tmp_path / "nowhere.json").as_uri()}
    tree.node("pf", {"01-A.md": "A [fake:codex-text-only]\n"}, "--agent", "codex",
              "--model", "gpt-fixture", "--max-iters", "1", "--no-sync")
    start_all(tree, ["pf"], fakes.env(**missing))
    status, code, reason = _run(tree, "pf")
    assert (status, code) == ("exited", 1)
    assert str(reason).startswith(f"no price table at {cache}, and the codex agent is priced")
    assert fakes.calls("codex") == []

    cache.parent.mkdir()
    cache.write_text(PRICES_FIXTURE.read_text())
    old = time.time() - 3 * 24 * 3600
    os.utime(cache, (old, old))
    tree.cli("node", "start", "pf", "--continue", env=fakes.env(**missing))
    assert tree.wait_settled("pf") == "completed"
    # the run went ahead on the old copy, with a warning in the pane (and its log)
    log = (tree.node_dir("pf") / "supervisor.log").read_text()
    assert "could not refresh the price table" in log and "from 72 h ago" in log
    assert step_rows(tree, "pf")[0][4] == pytest.approx(0.002)


def test_live_retune_of_max_iters(tree: Tree, tmp_path: Path) -> None:
    go = tmp_path / "go"
    tree.node("mi", {"01-A.md": f"A [stub:wait-file={go}]\n"}, "--max-iters", "50", "--no-sync")
    tree.cli("node", "start", "mi")
    wait_until(lambda: tree.sql("SELECT 1 FROM steps WHERE node = 'main.mi' AND pgid IS NOT "
                                "NULL"), timeout=60, message="iteration 1 running")
    out = tree.cli("node", "config", "set", "max_iters=2", cwd=tree.worktree("mi"))
    assert out.stdout.strip() == "max_iters: 50 -> 2"
    go.touch()
    assert tree.wait_settled("mi") == "completed"
    assert _run(tree, "mi") == ("completed", 0, "Reached max iterations (2)")
    assert tree.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.mi'") == [(2,)]


def test_live_retune_of_max_cost_and_registry_healing(tree: Tree, tmp_path: Path) -> None:
    go = tmp_path / "go"
    tree.node("mc", {"01-A.md": f"A [stub:cost=0.2] [stub:wait-file={go}]\n"},
              "--max-cost", "10", "--no-sync", "--step-timeout", "1m")
    tree.cli("node", "start", "mc")
    wait_until(lambda: tree.sql("SELECT cost FROM steps WHERE node = 'main.mc'") == [(0.2,)],
               timeout=60, message="iteration 1 spent")
    out = tree.cli("node", "update", "mc", "--max-cost", "0.3", "--title", "retuned")
    assert out.stdout.splitlines() == ["max_cost: 10.0 -> 0.3", 'title: null -> "retuned"',
                                       "reserve_budget: 1.0 -> 0.03"]
    assert tree.sql("SELECT max_cost, title FROM nodes WHERE node = 'main.mc'") == [
        (0.3, "retuned")]
    # a direct edit wins; the loop heals the registry at its next iteration top
    path = tree.node_dir("mc") / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "max_depth": 2}))
    go.touch()
    assert tree.wait_settled("mc") == "exited"
    assert _run(tree, "mc") == ("exited", 0, "subtree cost budget reached (spent $0.4000 >= "
                                "$0.3 max)")
    assert tree.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.mc'") == [(2,)]
    assert tree.sql("SELECT max_depth FROM nodes WHERE node = 'main.mc'") == [(2,)]
    healed = tree.sql("SELECT metadata FROM events WHERE node = 'main.mc' AND event = 'budget' "
                      "AND metadata LIKE 'registry max_depth%'")
    assert healed == [("registry max_depth None differs from config.json 2; healed the "
                       "registry (retune with `fractal node update`)",)]
