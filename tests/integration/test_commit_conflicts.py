"""Never commit a conflict: ``fractal commit`` and the backstop refuse a worktree holding
one and leave it exactly as it was; plus the smaller commit defects fixed beside them
(merge-commit file counts, node-dir files of a scoped node, hand commits between runs,
a second ``--init``, in-flight steps in spend reads, the agent's ``PWD``)."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from fractal.errors import FractalError
from fractal.lifecycle.commit import CommitMode
from fractal.procs.processes import spawn_group
from fractal.runtime.edges import backstop
from fractal.store import spend
from fractal.store.ledger import Ledger
from fractal.workspace.artifacts import is_runtime_artifact
from fractal.workspace.backstop import backstop_commit
from fractal.workspace.commit_types import UnresolvedConflict
from fractal.workspace.git import commit_files
from tests.fakes import RecordingReporter
from tests.helpers import git, wait_until
from tests.integration.test_commit_pipeline import Node, make_node


def snapshot(wt: Path) -> tuple[str, ...]:
    """HEAD, the index, the status, every file's bytes (runtime artifacts such as the tree's
    database aside) and the git dir's merge state."""
    files = []
    for path in sorted(wt.rglob("*")):
        if ".git" in path.parts or ".worktrees" in path.parts or not path.is_file() \
                or is_runtime_artifact(path.relative_to(wt).as_posix()):
            continue
        files.append(f"{path.relative_to(wt)}:{hashlib.sha1(path.read_bytes()).hexdigest()}")
    merge_head = git(wt, "rev-parse", "--git-path", "MERGE_HEAD")
    return (git(wt, "rev-parse", "HEAD"), git(wt, "ls-files", "-s"),
            git(wt, "status", "--porcelain", "--untracked-files=all"), *files,
            str((wt / merge_head).exists()))


def conflicted(node: Node) -> None:
    """Leave ``node`` in a merge with ``calc/ops.py`` conflicting, ``calc/ok.py`` merged."""
    wt = node.wt
    node.write("calc/ops.py", "x = 0\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    git(wt, "checkout", "-q", "-b", "other")
    node.write("calc/ops.py", "x = 2\n")
    node.write("calc/ok.py", "ok = 1\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "theirs")
    git(wt, "checkout", "-q", node.paths.branch)
    node.write("calc/ops.py", "x = 1\n")
    git(wt, "commit", "-q", "-am", "ours")
    proc = git_rc(wt, "merge", "-q", "other")
    assert proc != 0


def git_rc(cwd: Path, *args: str) -> int:
    import subprocess

    return subprocess.run(["git", *args], cwd=cwd, capture_output=True).returncode


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


def test_fractal_commit_refuses_a_merge_in_conflict_and_changes_nothing(node: Node) -> None:
    conflicted(node)
    node.write("notes.txt", "untracked\n")
    before = snapshot(node.wt)
    with pytest.raises(UnresolvedConflict) as caught:
        node.commit("merge other")
    assert caught.value.reason == "unresolved merge conflict in calc/ops.py"
    assert "git merge --abort" in str(caught.value)
    assert snapshot(node.wt) == before
    for mode in (CommitMode.FORCE, CommitMode.IGNORE_SCOPE):
        with pytest.raises(UnresolvedConflict):
            node.commit("merge other", mode=mode)
        assert snapshot(node.wt) == before


def test_backstop_refuses_and_the_iteration_reason_names_the_files(node: Node) -> None:
    conflicted(node)
    before = snapshot(node.wt)
    with pytest.raises(UnresolvedConflict):
        backstop_commit(node.wt, subject="main.a: iteration 1.1 (auto)")
    assert snapshot(node.wt) == before
    reporter = RecordingReporter()
    sha, problem = backstop(node.wt, "main.a: iteration 1.1 (auto)", "", reporter,
                            branch="main.a")
    assert (sha, problem) == (None, "unresolved merge conflict in calc/ops.py")
    assert any("calc/ops.py" in line for line in reporter.lines)
    assert snapshot(node.wt) == before


def test_a_resolved_but_unconcluded_merge_is_still_refused(node: Node) -> None:
    conflicted(node)
    node.write("calc/ops.py", "x = 3\n")
    git(node.wt, "add", "calc/ops.py")
    before = snapshot(node.wt)
    with pytest.raises(UnresolvedConflict) as caught:
        node.commit("merge other")
    assert caught.value.reason == "unresolved merge in progress"
    assert "git commit --no-edit" in str(caught.value)
    with pytest.raises(UnresolvedConflict):
        backstop_commit(node.wt, subject="main.a: iteration 1.1 (auto)")
    assert snapshot(node.wt) == before
    git(node.wt, "commit", "-q", "--no-edit")
    assert set(commit_files(node.wt, "HEAD")) == {"calc/ops.py", "calc/ok.py"}


@pytest.mark.parametrize("staged", [True, False])
def test_marker_lines_are_refused_without_any_merge(node: Node, staged: bool) -> None:
    node.write("calc/ops.py", "<<<<<<< HEAD\nx = 1\n=======\nx = 2\n>>>>>>> other\n")
    node.write("docs.rst", "Title\n=======\n")
    if staged:
        git(node.wt, "add", "-A")
    before = snapshot(node.wt)
    with pytest.raises(UnresolvedConflict, match=r"conflict in calc/ops\.py;"):
        node.commit("add ops")
    with pytest.raises(UnresolvedConflict):
        backstop_commit(node.wt, subject="main.a: iteration 1.1 (auto)")
    assert snapshot(node.wt) == before


def test_a_scoped_node_commits_new_files_in_its_own_node_dir(tmp_path: Path) -> None:
    node = make_node(tmp_path, scope="src")
    node.write(".fractal/main.a/plans/p.md", "plan\n")
    node.write("src/a.py", "a = 1\n")
    outcome = node.commit("add the plan").outcome
    assert set(outcome.files) == {".fractal/main.a/plans/p.md", "src/a.py"}
    node.write(".fractal/main.a/memory/m.md", "note\n")
    sha = backstop_commit(node.wt, subject="main.a: operator edits",
                          paths=[".fractal/main.a/"])
    assert sha is not None and commit_files(node.wt, sha) == (".fractal/main.a/memory/m.md",)


def test_a_hand_commit_between_runs_is_the_operators(node: Node) -> None:
    ledger = Ledger(node.tree.db_path)
    ledger.close_iteration(node.iter_id, "completed", 0, "")
    ledger.close_run(node.run_id, "completed", 0, "done")
    node.write("b.txt")
    result = node.commit("fix a typo")
    assert node.subject() == "main.a: operator (fix a typo)"
    assert result.lineage.actor == "operator" and result.lineage.run_id is None
    assert node.events()[-1][1:5] == ("operator", "completed", result.outcome.sha, None)


def test_a_second_baseline_is_refused(node: Node) -> None:
    node.write("a.txt")
    node.commit("the baseline", mode=CommitMode.INIT)
    assert node.subject() == "main.a: init (the baseline)"
    assert node.commit("again", mode=CommitMode.INIT).outcome.sha is None  # nothing: no-op
    node.write("b.txt")
    before = node.head()
    with pytest.raises(FractalError, match="already has its baseline"):
        node.commit("again", mode=CommitMode.INIT)
    assert node.head() == before


def test_steps_in_flight_are_not_unpriced(node: Node) -> None:
    ledger = Ledger(node.tree.db_path)
    step_id = ledger.open_step(node="main.a", run_id=node.run_id, iter_id=node.iter_id,
                               step=1, step_name="WORK", agent=None, model=None, session="s")
    ledger.set_step_process(step_id, 4242, 1.0)
    running = spend.run_spend(node.tree.db_path, node.run_id)
    assert (running.priced, running.unpriced, running.untracked) == (0, 0, False)
    ledger.close_step(step_id, "completed", 0, "")
    ended = spend.run_spend(node.tree.db_path, node.run_id)
    assert (ended.priced, ended.unpriced, ended.untracked) == (0, 1, True)


def test_a_launched_process_sees_its_own_worktree_as_pwd(node: Node, tmp_path: Path) -> None:
    out = tmp_path / "pwd.txt"
    env = {**os.environ, "PWD": str(node.repo)}  # the parent's worktree
    launched = spawn_group([sys.executable, "-c",
                            f"import os; open({str(out)!r}, 'w').write(os.environ['PWD'])"],
                           cwd=node.wt, env=env)
    launched.popen.wait(timeout=30)
    wait_until(out.exists)
    assert out.read_text() == str(node.wt)
