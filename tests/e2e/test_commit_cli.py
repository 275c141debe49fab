"""``fractal commit`` through the real CLI: usage errors, refusals, output streams, and the
agent committing from inside a real node run (the backstop then finds nothing left)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import Tree, run_cli
from tests.helpers import git

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("args", [
    ["--init", "--force", "msg"], ["--check", "--ignore-scope"], ["--ignore-scope", "--force", "m"],
    ["--init", "--check"], [], ["--force"], ["--check", "msg"],
], ids=["init+force", "check+ignore-scope", "ignore-scope+force", "init+check", "no-message",
        "force-no-message", "check-with-message"])
def test_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    out = run_cli(["commit", *args], tmp_path, check=False)
    assert out.returncode == 2, out.stderr
    assert "Usage:" in out.stderr and "Traceback" not in out.stderr


def test_refusals_are_errors_without_tracebacks(tree: Tree) -> None:
    tree.node("r", None, "--scope", "src")
    wt = tree.worktree("r")
    (wt / "outside.txt").write_text("x\n")
    for args, needle in ((["main.r: add x"], "branch name"),
                         (["iteration 3"], "'iteration'"),
                         (["--init", "add outside"], "outside.txt"),
                         (["--check"], "outside.txt")):
        out = tree.cli("commit", *args, check=False, cwd=wt)
        assert out.returncode == 1, (args, out.stderr)
        assert out.stderr.startswith("Error: ") and needle in out.stderr
        assert "Traceback" not in out.stderr and out.stdout == ""
    root = tree.cli("commit", "add things", check=False)
    assert root.returncode == 1 and "root" in root.stderr


def test_baseline_commits_print_the_sha_on_stdout(tree: Tree) -> None:
    (tree.repo / "wiki").mkdir(exist_ok=True)  # `fractal init` made the project wiki
    (tree.repo / "wiki" / "build.md").write_text("# Build\n\nRun make.\n")
    out = tree.cli("commit", "--init", "project wiki")
    assert out.stdout.strip() == git(tree.repo, "rev-parse", "HEAD")
    assert git(tree.repo, "log", "-1", "--format=%s") == "main: init (project wiki)"
    assert "committed" in out.stderr and "no origin remote" in out.stderr
    tree.node("b", None, "--scope", "src")
    wt = tree.worktree("b")
    (wt / "src").mkdir()
    (wt / "src" / "a.py").write_text("a = 1\n")
    out = tree.cli("commit", "--init", "seed the sources", cwd=wt)
    assert out.stdout.strip() == git(wt, "rev-parse", "HEAD")
    assert git(wt, "log", "-1", "--format=%an|%s") == "main.b|main.b: init (seed the sources)"
    assert tree.cli("commit", "--check", cwd=wt).returncode == 0
    again = tree.cli("commit", "--init", "seed the sources", cwd=wt)
    assert again.stdout == "" and "nothing to commit" in again.stderr


def test_agent_commit_inside_the_loop_leaves_the_backstop_nothing(tree: Tree) -> None:
    steps = {"01-WORK.md": "[stub:write=src/work.txt:hello] [stub:commit=add the work file]\n"}
    tree.node("worker", steps, "--max-iters", "1", "--no-sync", "--scope", "src")
    base = git(tree.repo, "rev-parse", "main.worker")
    tree.cli("node", "start", "worker")
    assert tree.wait_settled("worker") == "completed"

    run_id = tree.sql("SELECT run_id FROM runs WHERE node = 'main.worker'")[0][0]
    subjects = git(tree.repo, "log", "--format=%s", f"{base}..main.worker").splitlines()
    assert subjects == [f"main.worker: iteration {run_id}.1 (add the work file)"]
    assert git(tree.repo, "show", "main.worker:src/work.txt") == "hello"
    assert git(tree.worktree("worker"), "status", "--porcelain") == ""

    sha = git(tree.repo, "rev-parse", "main.worker")
    events = tree.sql("SELECT actor, status, metadata, run_id, iter_id, step_id FROM events "
                      "WHERE event = 'commit'")
    step = tree.sql("SELECT iter_id, step_id FROM steps WHERE step_name = 'WORK'")[0]
    assert events == [("agent", "completed", sha, run_id, step[0], step[1])]


def test_a_node_that_never_ran_is_told_to_use_init_and_its_help_says_so(tree: Tree) -> None:
    tree.node("fresh", None)
    wt = tree.worktree("fresh")
    (wt / "notes.txt").write_text("before the first start\n")
    out = tree.cli("commit", "add notes", check=False, cwd=wt)
    assert out.returncode == 1 and "no run yet" in out.stderr, out.stderr
    assert "fractal commit --init MESSAGE" in out.stderr
    done = tree.cli("commit", "--init", "add notes", cwd=wt)
    assert git(wt, "log", "-1", "--format=%s") == "main.fresh: init (add notes)", done.stderr
    helped = tree.cli("commit", "--help").stdout
    assert "never ran" in " ".join(helped.split())
