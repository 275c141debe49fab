"""A new user's findings on a real tree (real git, real SQLite, the real CLI as a
subprocess): short names inside a loop resolve near the loop's node, a parent waiting on
a child nobody started is an inbox item, the operator reads any node's inbox."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import copy_of_tree, force_status, git, make_repo
from tests.trees import run_cli


def _fractal(cwd: Path, *args: str, loop: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "_NODE"}
    if loop is not None:
        env["_NODE"] = str(loop)
    return run_cli(list(args), cwd, env=env, check=False)


def _build(repo: Path) -> None:
    make_repo(repo)
    for args in (["init"], ["node", "init", "a1"], ["node", "init", "a2"]):
        assert _fractal(repo, *args).returncode == 0
    for parent in ("a1", "a2"):
        out = _fractal(repo / ".worktrees" / f"main.{parent}", "node", "init", "x")
        assert out.returncode == 0, out.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """``main`` with ``main.a1``, ``main.a2`` and a child ``x`` under each, made by the CLI
    once per test process and copied for each test."""
    yield copy_of_tree(tmp_path / "repo", "fresh-a1-a2-x", _build)
    close_engines()


def _node_dir(repo: Path, branch: str) -> Path:
    return repo / ".worktrees" / branch / ".fractal" / branch


def test_inside_a_loop_a_short_name_means_the_loops_own_child(repo: Path) -> None:
    a2 = repo / ".worktrees" / "main.a2"
    out = _fractal(a2, "node", "list", "x", "--json", loop=_node_dir(repo, "main.a2"))
    assert out.returncode == 0, out.stderr
    assert [r["node"] for r in json.loads(out.stdout)] == ["main.a2.x"]
    out = _fractal(repo, "node", "list", "x", "--json", loop=_node_dir(repo, "main.a1"))
    assert out.returncode == 0, out.stderr
    assert [r["node"] for r in json.loads(out.stdout)] == ["main.a1.x"]
    # Outside any loop the name still covers the whole tree, from a worktree as well.
    for where in (repo, a2):
        out = _fractal(where, "node", "status", "x")
        assert out.returncode == 1 and "ambiguous: main.a1.x, main.a2.x" in out.stderr


def _inbox(repo: Path) -> list[dict[str, object]]:
    out = _fractal(repo, "inbox", "--json")
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)
    assert isinstance(items, list)
    return items


def test_a_parent_waiting_on_a_child_nobody_started_is_an_inbox_item(repo: Path) -> None:
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a2", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a2", "active")
    assert [i for i in _inbox(repo) if i["kind"] == "unstarted"] == []  # not waiting yet
    ledger.open_step(node="main.a2", run_id=run, iter_id=None, step=4, step_name="WAIT",
                     agent=None, model=None, session=None)
    items = [i for i in _inbox(repo) if i["kind"] == "unstarted"]
    assert len(items) == 1
    item = items[0]
    assert item["node"] == "main.a2" and item["command"] == "fractal node start main.a2.x"
    assert "1 child nobody has started (x)" in str(item["summary"])
    details = item["details"]
    assert isinstance(details, dict) and details["children"] == ["main.a2.x"]
    # Once the child has a run of its own, the item is gone.
    ledger.open_run("main.a2.x", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a2.x", "active")
    assert [i for i in _inbox(repo) if i["kind"] == "unstarted"] == []


def test_the_operator_reads_any_nodes_inbox_and_a_node_still_may_not(repo: Path) -> None:
    a1 = repo / ".worktrees" / "main.a1"
    out = _fractal(a1, "radio", "send", "--node", "main.a2", "--subject", "heads up",
                   "--priority", "5", "body",
                   loop=_node_dir(repo, "main.a1"))
    assert out.returncode == 0, out.stderr
    out = _fractal(repo, "radio", "messages", "--node", "main.a2", "--json")
    assert out.returncode == 0, out.stderr
    assert [m["subject"] for m in json.loads(out.stdout)] == ["heads up"]
    out = _fractal(a1, "radio", "messages", "--node", "main.a2", loop=_node_dir(repo, "main.a1"))
    assert out.returncode == 1 and "cannot read the inbox of main.a2" in out.stderr


def test_a_paused_item_shows_the_reason_the_pause_was_given(repo: Path) -> None:
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a1", "active")
    ledger.signal_run("main.a1", run, "pause", actor="operator", reason="lunch")
    force_status(ledger.db_path, "main.a1", "paused")
    ledger.add_event("main.a1", "pause", actor="loop", status="completed",
                     metadata="parked during PREPARE", run_id=run)
    items = [i for i in _inbox(repo) if i["kind"] == "paused"]
    assert [i["summary"] for i in items] == ["paused: lunch (during PREPARE)"]
    details = items[0]["details"]
    assert isinstance(details, dict) and details["reason"] == "parked during PREPARE"


def test_conflicts_says_how_many_children_it_skipped_and_why(repo: Path) -> None:
    out = _fractal(repo, "node", "conflicts")
    assert out.returncode == 0, out.stderr
    assert ("notice: every child of main skipped, nothing of them left to collide (no work "
            "to merge: a1, a2)") in out.stderr  # never merged: not "already merged"
    assert "has no children" not in out.stderr
    a1 = repo / ".worktrees" / "main.a1"
    (a1 / "work.txt").write_text("a1\n")
    git(a1, "add", "work.txt")
    git(a1, "commit", "-q", "-m", "a1 work")
    out = _fractal(repo, "node", "conflicts")
    assert out.returncode == 0, out.stderr
    assert "main.a1,main,False" in out.stdout
    assert "notice: 1 child of main skipped, nothing of it left to collide (no work to " \
        "merge: a2)" in out.stderr
    leaf = _fractal(repo, "node", "conflicts", "a1.x")
    assert leaf.returncode == 0 and "main.a1.x has no children to compare" in leaf.stderr
    assert _fractal(repo, "node", "merge", "a1").returncode == 0
    out = _fractal(repo, "node", "conflicts")
    assert ("notice: every child of main skipped, nothing of them left to collide (already "
            "merged: a1; no work to merge: a2)") in out.stderr


def test_an_exited_item_goes_once_the_nodes_work_is_merged(repo: Path) -> None:
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(run, "exited", 1, "Exited at iteration 1.1")
    force_status(ledger.db_path, "main.a1", "exited")
    assert [i["node"] for i in _inbox(repo) if i["kind"] == "exited"] == ["main.a1"]
    a1 = repo / ".worktrees" / "main.a1"
    (a1 / "work.txt").write_text("a1\n")
    git(a1, "add", "work.txt")
    git(a1, "commit", "-q", "-m", "a1 work")
    out = _fractal(repo, "node", "merge", "a1", "--force")  # the user resolved it
    assert out.returncode == 0, out.stderr
    assert [i for i in _inbox(repo) if i["kind"] == "exited"] == []
