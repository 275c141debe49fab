"""A node cannot loosen the limits its parent or the operator set, through the real CLI.

A hostile agent (a shell script of the ``command`` backend, run by the real supervisor in
a private tmux server, with no sandbox: it may write every file of its worktree) tries to
lift its cost ceiling with ``fractal node config set`` and by editing ``config.json``,
to disarm its approval gate by dropping its iteration cap into reserve mode or by
deleting ``requires_approval`` from its step file, and to have its unreviewed work merged
by stopping itself before the gate. Each attempt fails, and what the parent set holds:
the run ends on its budget, the gate waits for the parent's approval, the merge is
refused. The parent's own agent still raises its child's ceiling either way it may."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

pytestmark = pytest.mark.e2e

_GATED = "---\nrequires_approval: true\n---\nthe reviewed step\n"


def _agent(path: Path, hack: str, cost: float) -> Path:
    """A command agent (sh): on a prompt naming HACK it runs ``hack`` (with ``$OUT``, the
    directory of its records), then reports ``cost`` USD."""
    out = path.parent / "records"
    out.mkdir(exist_ok=True)
    path.write_text(f"""#!/bin/sh
prompt=$(cat)
OUT='{out}'
FR="${{FRACTAL_BIN:-fractal}}"
case "$prompt" in
  *HACK*)
{hack}
  ;;
esac
echo '{{"type": "cost", "usd": {cost}}}'
""")
    path.chmod(0o755)
    return path


def _node(tree: Tree, name: str, agent: Path, steps: dict[str, str], *opts: str) -> None:
    """Node ``main.NAME`` run by ``agent`` with ``steps`` (committed)."""
    tree.cli("node", "init", name, "--agent", str(agent), "--no-sync", "--step-timeout", "10m",
             *opts)
    steps_dir = tree.node_dir(name) / "steps"
    for old in steps_dir.iterdir():
        old.unlink()
    for filename, body in steps.items():
        (steps_dir / filename).write_text(body)
    git(tree.worktree(name), "add", "-A")
    git(tree.worktree(name), "commit", "-q", "-m", "steps", "--no-verify")


def _run(tree: Tree, name: str) -> tuple[object, ...]:
    return tree.sql("SELECT status, exit_code, metadata FROM runs WHERE node = ? "
                    "ORDER BY run_id DESC LIMIT 1", f"main.{name}")[0]


def _gate_pending(tree: Tree, name: str) -> bool:
    return bool(tree.sql("SELECT 1 FROM steps WHERE node = ? AND step_name = 'GATE' AND "
                         "approved = '' AND metadata LIKE '%awaiting approval%'", f"main.{name}"))


@pytest.mark.parametrize("how", ["config-set", "hand-edit"])
def test_a_node_cannot_lift_its_own_cost_ceiling(tree: Tree, tmp_path: Path, how: str) -> None:
    """``config set max_cost=null`` is refused; a hand edit of config.json that clears the
    ceiling is not honoured: the run ends on the $0.05 its start recorded, after one
    iteration of the three it was given, and ``cost remaining`` still counts against it."""
    if how == "config-set":
        hack = ('"$FR" node config set max_cost=null >"$OUT/set.out" 2>"$OUT/set.err"\n'
                'echo $? >"$OUT/set.rc"')
    else:
        hack = ("python3 -c \"import json,os; p=os.environ['NODE_DIR']+'/config.json'; "
                "c=json.load(open(p)); c.update(max_cost=None, reserve_budget=None); "
                "json.dump(c, open(p, 'w'))\"")
    hack += '\n"$FR" node cost remaining >"$OUT/remaining.out" 2>&1'
    agent = _agent(tmp_path / "agent", hack, 0.2)
    _node(tree, "h", agent, {"01-HACK.md": "HACK\n"}, "--max-cost", "0.05", "--max-iters", "3")
    tree.cli("node", "start", "h")
    assert tree.wait_settled("h", timeout=120) == "exited"
    status, code, reason = _run(tree, "h")
    assert (status, code) == ("exited", 0) and "budget reached" in str(reason), reason
    assert tree.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.h'") == [(1,)]
    records = tmp_path / "records"
    assert (records / "remaining.out").read_text().strip() == "$0.0500"
    if how == "config-set":
        assert (records / "set.rc").read_text().strip() == "1"
        err = (records / "set.err").read_text()
        assert "main.h may only tighten its own limits: max_cost would raise" in err
        assert "only the operator at the root may raise max_cost" in err
        assert tree.config("h")["max_cost"] == 0.05
        assert tree.sql("SELECT actor FROM events WHERE node = 'main.h' AND event = 'config' "
                        "AND status = 'failed'") == [("main.h",)]


def test_reserve_mode_does_not_skip_the_gate(tree: Tree, tmp_path: Path) -> None:
    """Its own ``max_iter_cost=0.0001`` is a tightening (accepted) that puts the rest of the
    iteration in reserve mode; the gated step still waits for the parent's approval."""
    agent = _agent(tmp_path / "agent", '"$FR" node config set max_iter_cost=0.0001 '
                   '>"$OUT/set.out" 2>&1\necho $? >"$OUT/set.rc"', 0.01)
    _node(tree, "r", agent, {"01-HACK.md": "HACK\n", "02-GATE.md": _GATED},
          "--max-cost", "5", "--max-iters", "1")
    tree.cli("node", "start", "r")
    wait_until(lambda: _gate_pending(tree, "r"), timeout=60, message="GATE awaiting approval")
    assert (tmp_path / "records" / "set.rc").read_text().strip() == "0"
    assert any("reserve mode" in str(m) for (m,) in tree.sql(
        "SELECT metadata FROM events WHERE node = 'main.r' AND event = 'budget'"))
    tree.cli("node", "approve", "r")
    assert tree.wait_settled("r", timeout=60) == "completed"
    (approved,) = tree.sql("SELECT approved FROM steps WHERE node = 'main.r' AND "
                           "step_name = 'GATE'")
    assert approved[0]


def test_deleting_requires_approval_does_not_lift_the_gate(tree: Tree, tmp_path: Path) -> None:
    """The gates a run holds are the ones its step files had when it started: the second
    iteration, which reads the edited step file, still waits for the approval."""
    agent = _agent(tmp_path / "agent", "sed -i '/requires_approval/d' "
                   '"$NODE_DIR/steps/02-GATE.md"', 0.01)
    _node(tree, "d", agent, {"01-HACK.md": "HACK\n", "02-GATE.md": _GATED},
          "--max-iters", "2")
    tree.cli("node", "start", "d")
    for iteration in (1, 2):
        wait_until(lambda: _gate_pending(tree, "d"), timeout=60,
                   message=f"GATE of iteration {iteration} awaiting approval")
        assert "requires_approval" not in (tree.node_dir("d") / "steps" /
                                           "02-GATE.md").read_text()
        tree.cli("node", "approve", "d")
    assert tree.wait_settled("d", timeout=60) == "completed"
    approved = tree.sql("SELECT approved FROM steps WHERE node = 'main.d' AND "
                        "step_name = 'GATE'")
    assert len(approved) == 2 and all(stamp for (stamp,) in approved)


def test_a_node_that_stops_before_its_gate_is_not_merged_unreviewed(
        tree: Tree, tmp_path: Path) -> None:
    """It drops the gate from its step file, does its work and stops itself before the
    gated step: the run recorded GATE as a gate, nobody approved it, so the merge is
    refused without --force."""
    agent = _agent(tmp_path / "agent", "sed -i '/requires_approval/d' "
                   '"$NODE_DIR/steps/02-GATE.md"\necho unreviewed >work.txt\n'
                   '"$FR" commit "unreviewed work" >"$OUT/commit.out" 2>&1\n'
                   '"$FR" node stop >"$OUT/stop.out" 2>&1', 0.01)
    _node(tree, "s", agent, {"01-HACK.md": "HACK\n", "02-GATE.md": _GATED},
          "--max-iters", "1")
    tree.cli("node", "start", "s")
    assert tree.wait_settled("s", timeout=60) == "stopped"
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE node = 'main.s' AND "
                    "step_name = 'GATE'") == [(0,)]
    merged = tree.cli("node", "merge", "s", check=False)
    assert merged.returncode == 1
    assert "main.s's last run ended (stopped) with GATE never approved" in merged.stderr
    assert not (tree.repo / "work.txt").exists()


def test_the_parent_may_still_raise_its_childs_ceiling(tree: Tree, tmp_path: Path) -> None:
    """The parent's agent raises ``main.p.c``'s ceiling with ``update`` and with ``config
    set --node``; the child's own retune stays its own business."""
    hack = ('"$FR" node update c --max-cost 0.5 >"$OUT/update.out" 2>&1\n'
            'echo $? >"$OUT/update.rc"\n'
            '"$FR" node config set --node main.p.c max_cost=0.8 max_iters=null '
            '>"$OUT/set.out" 2>&1\necho $? >"$OUT/set.rc"')
    agent = _agent(tmp_path / "agent", hack, 0.01)
    _node(tree, "p", agent, {"01-HACK.md": "HACK\n"}, "--max-cost", "5", "--max-iters", "1")
    tree.cli("node", "init", "c", "--parent", "p", "--max-cost", "0.1", "--max-iters", "1")
    tree.cli("node", "start", "p")
    assert tree.wait_settled("p", timeout=60) == "completed"
    records = tmp_path / "records"
    assert (records / "update.rc").read_text().strip() == "0", (records / "update.out").read_text()
    assert (records / "set.rc").read_text().strip() == "0", (records / "set.out").read_text()
    config = json.loads((tree.node_dir("p.c") / "config.json").read_text())
    assert (config["max_cost"], config["max_iters"]) == (0.8, None)
    assert tree.sql("SELECT max_cost FROM nodes WHERE node = 'main.p.c'") == [(0.8,)]
