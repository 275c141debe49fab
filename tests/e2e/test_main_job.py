"""The main job end to end: init, node init, start in tmux, iterations, rows, commits."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git

pytestmark = pytest.mark.e2e

TWO_STEPS = {
    "01-WRITE.md": "Write a file. [stub:append=notes.txt:iteration $ITER_REF] [stub:cost=0.01]\n",
    "02-CHECK.md": "---\ntimeout: 1m\n---\nCheck it. [stub:capture=CAPTURE]\n",
}


def test_node_runs_iterations_and_records_every_row(tree: Tree) -> None:
    capture = tree.repo.parent / "capture"
    steps = {k: v.replace("CAPTURE", str(capture)) for k, v in TWO_STEPS.items()}
    tree.node("worker", steps, "--max-iters", "2", "--no-sync", "--title", "writes notes")
    out = tree.cli("node", "start", "worker")
    assert "started main.worker" in out.stderr
    assert tree.wait_settled("worker") == "completed"

    runs = tree.sql("SELECT run_id, status, exit_code, metadata, ended_at FROM runs")
    assert [(r[1], r[2], r[3]) for r in runs] == [("completed", 0, "Reached max iterations (2)")]
    iters = tree.sql("SELECT iter, status, exit_code FROM iterations ORDER BY iter")
    assert iters == [(1, "completed", 0), (2, "completed", 0)]
    steps_rows = tree.sql("SELECT step, step_name, status, exit_code, cost FROM steps "
                          "ORDER BY step_id")
    assert steps_rows == [(1, "WRITE", "completed", 0, 0.01), (2, "CHECK", "completed", 0, None)] * 2

    # The work was committed on the node branch by the backstop.
    notes = git(tree.repo, "show", "main.worker:notes.txt")
    run_id = runs[0][0]
    assert notes.splitlines() == [f"iteration {run_id}.1", f"iteration {run_id}.2"]
    subjects = git(tree.repo, "log", "--format=%s", "main.worker").splitlines()
    assert f"main.worker: iteration {run_id}.1 (auto)" in subjects
    author = git(tree.repo, "log", "-1", "--format=%an", "main.worker")
    assert author == "main.worker"

    # The agent saw the loop's variables in its prompt and environment.
    call = json.loads((capture / "call-1.json").read_text())
    env = call["env"]
    assert env["STEP_LABEL"] == "step 2 of 2 (CHECK)"
    assert env["ITER_LABEL"] == "1 of 2"
    assert env["ITER_REF"] == f"{run_id}.1"
    assert env["CURRENT_BRANCH"] == "main.worker"
    assert env["STEP_TIMEOUT_SECONDS"] == ""
    assert env["STEP_LIMIT_SECONDS"] == "60"
    assert env["RUN_ID"] == str(run_id)
    assert env["STEP_ID"] != ""
    assert call["cwd"] == str(tree.worktree("worker"))
    assert "Do the step." in call["prompt"] and "Check it." in call["prompt"]

    # activity lists every run, iteration and step row, start and end, newest first.
    rows = json.loads(tree.cli("node", "activity", "worker", "--json").stdout)
    kinds = [(r["kind"], r["event"]) for r in rows]
    assert kinds.count(("run", "start")) == 1 and kinds.count(("run", "end")) == 1
    assert kinds.count(("iteration", "end")) == 2
    assert kinds.count(("step", "start")) == 4 and kinds.count(("step", "end")) == 4
    assert rows[0]["timestamp"] >= rows[-1]["timestamp"]
    status = tree.cli("node", "status", "worker").stdout.strip()
    assert status == "completed (Reached max iterations (2))"

    # The pane is gone with its session; its transcript stays, and is never committed.
    transcript = (tree.node_dir("worker") / "pane.log").read_text()
    assert "(WRITE)" in transcript and "(CHECK)" in transcript
    assert f"Run {run_id} completed (exit 0): Reached max iterations (2)" in transcript
    tracked = git(tree.repo, "ls-tree", "-r", "--name-only", "main.worker").splitlines()
    assert not any(name.endswith("pane.log") for name in tracked)
