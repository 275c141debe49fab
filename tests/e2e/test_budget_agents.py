"""Budgets with the claude- and codex-style fakes: an enforcing budget flag, token pricing,
refusals, the price-table preflight. Live retuning of a running node is tested in-process
(tests/unit/test_loop_budgets.py)."""

from __future__ import annotations

import os
import subprocess
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
    far = "http://127.0.0.1:9/" + "long-mirror-path/" * 20 + "prices.json"  # nothing listens
    missing = {"FRACTAL_PRICING_FILE": str(cache), "FRACTAL_PRICING_URL": far}
    # under a cost cap the run ends at preflight, the fetch's cause inside the clipped reason
    tree.node("pf", {"01-A.md": "A [fake:codex-text-only]\n"}, "--agent", "codex",
              "--model", "gpt-fixture", "--max-iters", "1", "--no-sync", "--max-cost", "5")
    start_all(tree, ["pf"], fakes.env(**missing))
    status, code, reason = _run(tree, "pf")
    assert (status, code) == ("exited", 1)
    assert str(reason).startswith("cannot price the codex agent under max_cost: could not "
                                  "fetch the price table: <urlopen error [Errno 111] "
                                  "Connection refused> (from http://127.0.0.1:9/long-")
    assert fakes.calls("codex") == []

    cache.parent.mkdir()
    cache.write_text(PRICES_FIXTURE.read_text())
    old = time.time() - 3 * 24 * 3600
    os.utime(cache, (old, old))
    # the status settles before the pane exits: a start meeting the pane is refused
    (session, sock), = tree.sql("SELECT tmux_session, tmux_socket FROM nodes WHERE node = ?",
                                "main.pf")
    wait_until(lambda: subprocess.run(["tmux", "-S", str(sock), "has-session", "-t",
                                       f"={session}"], capture_output=True).returncode != 0,
               timeout=30, message="pane gone")
    tree.cli("node", "start", "pf", "--continue", env=fakes.env(**missing))
    assert tree.wait_settled("pf") == "completed"
    # the run went ahead on the old copy, with a warning in the pane (and its log)
    log = (tree.node_dir("pf") / "supervisor.log").read_text()
    assert "could not refresh the price table" in log and "from 72 h ago" in log
    assert step_rows(tree, "pf")[0][4] == pytest.approx(0.002)


def test_without_a_cost_cap_a_missing_price_table_leaves_the_cost_unknown(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    cache = tmp_path / "prices" / "pricing.json"
    missing = {"FRACTAL_PRICING_FILE": str(cache),
               "FRACTAL_PRICING_URL": (tmp_path / "nowhere.json").as_uri()}
    tree.node("pn", {"01-A.md": "A [fake:codex-text-only]\n"}, "--agent", "codex",
              "--model", "gpt-fixture", "--max-iters", "1", "--no-sync")
    start_all(tree, ["pn"], fakes.env(**missing))
    assert tree.wait_settled("pn") == "completed"
    assert len(fakes.calls("codex")) == 1
    ((name, status, code, _meta, cost, *_),) = step_rows(tree, "pn")
    assert (name, status, code, cost) == ("A", "completed", 0, None)  # unknown, not 0.0
    log = (tree.node_dir("pn") / "supervisor.log").read_text()
    assert "no price table (could not fetch the price table: <urlopen error" in log
