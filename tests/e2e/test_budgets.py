"""Cost ceilings end to end with the stub agent reporting cost: the budget landing and
``--continue``, a ceiling over a parent and its child, and the cost a kill or a SIGKILLed
supervisor leaves. Reserve mode and the warnings are tested in-process
(tests/unit/test_loop_budgets.py)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import wait_until

pytestmark = pytest.mark.e2e


def _calls(capture: Path) -> list[dict[str, object]]:
    return [json.loads((capture / f"call-{n}.json").read_text())
            for n in range(1, len(list(capture.glob("call-*.json"))) + 1)]


def _run(tree: Tree, node: str) -> tuple[object, ...]:
    """(status, exit_code, metadata, max_cost) of the node's newest run."""
    return tree.sql("SELECT status, exit_code, metadata, max_cost FROM runs WHERE node = ? "
                    "ORDER BY run_id DESC LIMIT 1", f"main.{node}")[0]


def _steps(tree: Tree, node: str) -> list[tuple[object, ...]]:
    return tree.sql("SELECT step_name, status, exit_code, metadata, cost FROM steps "
                    "WHERE node = ? ORDER BY step_id", f"main.{node}")


def _budget_events(tree: Tree, node: str) -> list[str]:
    return [str(r[0]) for r in tree.sql("SELECT metadata FROM events WHERE node = ? AND "
                                        "event = 'budget' ORDER BY event_id", f"main.{node}")]


def test_budget_landing_exits_0_and_continue_needs_max_cost(tree: Tree) -> None:
    steps = {"01-ONE.md": "one [stub:cost=0.3]\n", "02-TWO.md": "two [stub:cost=0.3]\n"}
    tree.node("land", steps, "--max-cost", "1", "--no-sync", "--step-timeout", "1m")
    tree.cli("node", "start", "land")
    assert tree.wait_settled("land") == "exited"
    reason = "subtree cost budget reached (spent $1.2000 >= $1 max)"
    assert _run(tree, "land") == ("exited", 0, reason, 1.0)
    assert tree.cli("node", "status", "land").stdout.strip() == f"exited ({reason})"
    # iteration 1.2's second step ran in reserve: $0.1000 was left, inside the $0.1 reserve
    assert any("inside the $0.1 reserve" in e for e in _budget_events(tree, "land"))
    notice = tree.sql("SELECT subject, data FROM messages WHERE node = 'main.land'")
    # the run's end notice: the reason, the run's spend, the capped run's figures
    assert notice == [(f"run exited: {reason}",
                       f"{reason}\nrun 1 spent $1.2000\nspent $1.2000 of $1 max")]
    assert tree.cli("node", "cost", "spent", "land").stdout.strip() == "$1.2000"
    assert tree.cli("node", "cost", "remaining", "land").stdout.strip() == "$0.0000"

    refused = tree.cli("node", "start", "land", "--continue", check=False)
    assert refused.returncode == 1
    assert "ended on its cost budget" in refused.stderr
    assert "it spent $1.2000 of $1 max" in refused.stderr and "--max-cost" in refused.stderr
    assert tree.status("land") == "exited"
    # an armed ceiling that breaks the config is refused and nothing changes
    bad = tree.cli("node", "start", "land", "--continue", "--max-cost", "-1", check=False)
    assert bad.returncode == 1 and tree.config("land")["max_cost"] == 1.0
    assert tree.status("land") == "exited"

    tree.cli("node", "start", "land", "--continue", "--max-cost", "5")
    assert (tree.config("land")["max_cost"], tree.config("land")["reserve_budget"]) == (5.0, 0.5)
    assert tree.sql("SELECT max_cost FROM nodes WHERE node = 'main.land'") == [(5.0,)]
    assert tree.wait_settled("land") == "exited"
    # the new run armed the new ceiling and spent it afresh (budgets are per run)
    assert _run(tree, "land") == ("exited", 0, "cost budget reserve reached (spent $4.8000 "
                                  ">= $5 max - $0.5 reserve)", 5.0)


def test_subtree_ceiling_spans_parent_and_child(tree: Tree, tmp_path: Path) -> None:
    go, release, cap = tmp_path / "child-spent", tmp_path / "release", tmp_path / "cap"
    tree.node("p", {"01-WAIT.md": f"wait [stub:cost=0.3] [stub:wait-file={go}]\n",
                    "02-MORE.md": "more [stub:cost=0.3]\n"},
              "--max-cost", "1", "--reserve-budget", "0", "--no-sync", "--step-timeout", "2m")
    refused = tree.cli("node", "init", "c", "--parent", "p", "--max-cost", "1.5", check=False)
    assert refused.returncode == 1 and "does not fit main.p's remaining budget" in refused.stderr
    tree.cli("node", "init", "c", "--parent", "p", "--max-cost", "0.9")
    child_dir = tree.node_dir("p.c")
    for name in [p.name for p in (child_dir / "steps").iterdir()]:
        (child_dir / "steps" / name).unlink()
    (child_dir / "steps" / "01-X.md").write_text("x [stub:cost=0.4]\n")
    (child_dir / "steps" / "02-Y.md").write_text(f"y [stub:cost=0.4] [stub:wait-file={release}]\n")
    (child_dir / "steps" / "03-Z.md").write_text(
        f"z reserve=$RESERVE_MODE [stub:capture={cap}]\n")
    (child_dir / "config.json").write_text(json.dumps(
        {**tree.config("p.c"), "sync": False, "step_timeout": "2m"}))
    tree.cli("node", "start", "p")
    wait_until(lambda: tree.sql("SELECT COUNT(*) FROM runs WHERE node = 'main.p'")[0][0],
               timeout=60, message="the parent's run")
    tree.cli("node", "start", "p.c")
    wait_until(lambda: tree.sql("SELECT SUM(cost) FROM steps WHERE node = 'main.p.c'")[0][0]
               == pytest.approx(0.8), timeout=60, message="the child spent $0.80")
    go.touch()  # the parent's subtree now holds 0.3 + 0.8 >= $1
    wait_until(lambda: tree.sql("SELECT 1 FROM signals WHERE node = 'main.p.c' AND "
                                "signal = 'finish'"), timeout=60, message="finish cascaded")
    release.touch()
    assert tree.wait_settled("p", timeout=90) == "exited"
    assert tree.wait_settled("p.c", timeout=90) == "exited"
    parent_reason = "subtree cost budget reached (spent $1.1000 >= $1 max)"
    assert _run(tree, "p")[:3] == ("exited", 0, parent_reason)
    assert _run(tree, "p.c")[:3] == (
        "exited", 0, "ancestor cost budget reached (spent $0.8000 by this run; via main.p)")
    # the parent queued no more steps once over the ceiling
    assert _steps(tree, "p")[-1] == ("MORE", "stopped", 125, "over budget", 0.0)
    (z,) = _calls(cap)
    assert "reserve=true" in str(z["prompt"])  # the cascade put the child in reserve
    spent = tree.cli("node", "cost", "spent", "p", "--run")
    assert spent.stdout.strip() == "$1.1000"
    assert tree.cli("node", "cost", "spent", "p", "--run", "--max-depth", "0").stdout.strip() \
        == "$0.3000"
    rows = tree.cli("node", "cost", "breakdown", "p", "--csv").stdout.strip().splitlines()
    # the child's last step reported no cost: it is counted apart, never as $0
    assert rows == ["node,max_cost,spent,unpriced", "main.p,1,0.3,0", "main.p.c,0.9,0.8,1"]


def test_kill_marks_a_costless_step_unpriced(tree: Tree) -> None:
    tree.node("kil", {"01-HANG.md": "[stub:hang]\n"}, "--no-sync")
    tree.cli("node", "start", "kil")
    wait_until(lambda: tree.sql("SELECT 1 FROM steps WHERE node = 'main.kil' AND pgid IS NOT "
                                "NULL AND session IS NOT NULL"), timeout=60, message="running")
    tree.cli("node", "kill", "kil")
    tree.wait_settled("kil")
    ((status, meta, cost),) = tree.sql("SELECT status, metadata, cost FROM steps "
                                       "WHERE node = 'main.kil'")
    assert (status, cost) == ("killed", None) and meta.endswith("; unpriced")


def test_a_cost_figure_survives_a_sigkilled_supervisor(tree: Tree) -> None:
    tree.node("sk", {"01-PAY.md": "pay [stub:cost=0.25] [stub:hang]\n"}, "--max-cost", "5",
              "--no-sync", "--step-timeout", "5m")
    tree.cli("node", "start", "sk")
    wait_until(lambda: tree.sql("SELECT cost FROM steps WHERE node = 'main.sk'") == [(0.25,)],
               timeout=60, message="the cost flushed")
    ((pid,),) = tree.sql("SELECT supervisor_pid FROM nodes WHERE node = 'main.sk'")
    os.kill(int(str(pid)), signal.SIGKILL)
    wait_until(lambda: tree.cli("node", "status", "sk").stdout.startswith("paused"),
               timeout=60, message="healed")
    ((status, meta, cost),) = tree.sql("SELECT status, metadata, cost FROM steps "
                                       "WHERE node = 'main.sk'")
    assert (status, meta, cost) == ("paused", "interrupted: supervisor lost", 0.25)
    assert tree.cli("node", "cost", "spent", "sk").stdout.strip() == "$0.2500"
