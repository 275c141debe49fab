"""Checks run by fractal itself, end to end: a hanging exit check is stopped at
check_timeout, and ``node init --exit-check`` seeds the gate and the keys. What the exit
check and gate steps do to a run is tested in-process (tests/unit/test_loop_checks.py)."""

from __future__ import annotations

import os

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import check_rows, git

pytestmark = pytest.mark.e2e

FAST_KILL = {**os.environ, "FRACTAL_KILL_GRACE": "1"}


def test_a_check_that_hangs_is_stopped_at_check_timeout(tree: Tree) -> None:
    """The check runs as a process group under check_timeout: a hang is killed (exit 124),
    and the same timeout twice is no progress."""
    tree.node("slow", {"01-IDLE.md": "Nothing.\n"}, "--no-sync", "--max-iters", "4",
              "--exit-check", "echo starting; sleep 60", "--check-timeout", "1s")
    tree.cli("node", "start", "slow", env=FAST_KILL)
    assert tree.wait_settled("slow", timeout=60) == "exited"
    rows = check_rows(tree, "slow")
    assert [(r[2], r[3], r[4]) for r in rows] == [(124, "timed out after 1s", None)] * 2, rows
    assert tree.sql("SELECT metadata FROM runs") == [("no progress: timed out after 1s",)]


def test_node_init_exit_check_seeds_the_gate_and_the_keys(tree: Tree) -> None:
    tree.cli("node", "init", "seeded", "--exit-check", "make test", "--no-progress", "3")
    steps = tree.node_dir("seeded") / "steps"
    assert sorted(p.name for p in steps.iterdir()) == [
        "00-PREPARE.md", "01-PLAN.md", "02-EXECUTE.md", "03-CHECK.md", "04-REVIEW.md",
        "05-COMMIT.md"]
    gate = (steps / "03-CHECK.md").read_text()
    assert gate.startswith("---\ncheck: make test\non_fail: continue\n---\n")
    assert "$CHECK_OUTPUT" in (steps / "02-EXECUTE.md").read_text()
    config = tree.config("seeded")
    assert (config["exit_check"], config["check_timeout"], config["no_progress"]) == (
        "make test", "10m", 3)
    assert git(tree.worktree("seeded"), "status", "--porcelain") == ""  # in the init commit

    tree.cli("node", "init", "plain", "--no-progress", "null")
    assert sorted(p.name for p in (tree.node_dir("plain") / "steps").iterdir())[3:] == [
        "03-REVIEW.md", "04-COMMIT.md"]
    assert tree.config("plain")["no_progress"] is None

    bad = tree.cli("node", "init", "bad", "--check-timeout", "10", "--no-progress", "0",
                   check=False)
    assert bad.returncode == 1
    assert 'check_timeout: "10" needs a unit' in bad.stderr
    assert "no_progress: must be a whole number >= 1" in bad.stderr
