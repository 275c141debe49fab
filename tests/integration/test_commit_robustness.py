"""``fractal commit`` robustness (issue 6): a real pre-commit formatter hook, a stale or held
``index.lock``, a database written during commits, relative ``core.hooksPath``.

Each test drives the real pipeline (lifecycle.commit.commit_work) against real git.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pytest

from fractal.workspace.backstop import backstop_commit
from fractal.workspace.commit import LINT_TIMEOUT, PUSH_TIMEOUT
from fractal.workspace.commit_lock import COMMIT_TURN_WAIT, commit_turn, index_lock_path
from fractal.workspace.commit_types import CommitFailed, IndexLocked
from tests.helpers import git, wait_until
from tests.integration.test_commit_pipeline import Node, make_node, pre_commit_node

# --- pre-commit: a formatter that rewrites files and exits 1 -------------------------------

FORMATTER = """\
    import sys
    changed = False
    for name in sys.argv[1:]:
        text = open(name).read()
        fixed = "".join(line.rstrip() + "\\n" for line in text.splitlines())
        if fixed != text:
            open(name, "w").write(fixed)
            changed = True
    sys.exit(1 if changed else 0)
    """


def test_formatter_hook_rewrites_then_the_retry_lands(tmp_path: Path) -> None:
    node = pre_commit_node(tmp_path, FORMATTER, r"\.txt$")
    node.write("src/a.txt", "hello   \nworld\t\n")
    outcome = node.commit("add greeting").outcome
    assert outcome.sha == node.head()
    assert any("re-staged" in n for n in outcome.notices)
    assert git(node.wt, "show", "HEAD:src/a.txt") == "hello\nworld"
    assert git(node.wt, "status", "--porcelain") == ""
    assert node.subject() == f"main.a: iteration {node.run_id}.1 (add greeting)"


def test_a_hook_that_keeps_failing_fails_the_commit_with_its_output(tmp_path: Path) -> None:
    node = pre_commit_node(tmp_path, """\
        import sys
        print("policy says no")
        sys.exit(1)
        """, r"\.txt$")
    node.write("src/b.txt", "b\n")
    before = node.head()
    with pytest.raises(CommitFailed) as info:
        node.commit("add b")
    assert "policy says no" in str(info.value) and "twice" in str(info.value)
    assert node.head() == before and node.events() == []


# --- index.lock -----------------------------------------------------------------------------

@pytest.mark.usefixtures("short_lock_settle")
def test_stale_index_lock_is_removed_when_no_git_runs(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    lock = index_lock_path(node.wt)
    lock.write_text("")
    node.write("c.txt")
    outcome = node.commit("add c").outcome
    assert outcome.sha == node.head() and not lock.exists()
    assert any("removed a stale" in n and "index.lock" in n for n in outcome.notices)


@pytest.fixture
def live_git(tmp_path: Path) -> Iterator[tuple[Node, subprocess.Popen[bytes]]]:
    node = make_node(tmp_path)
    proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=node.wt, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)
    try:
        yield node, proc
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=10)


@pytest.mark.usefixtures("short_lock_settle")
def test_index_lock_of_a_live_git_process_is_reported_and_kept(
        live_git: tuple[Node, subprocess.Popen[bytes]]) -> None:
    node, proc = live_git
    lock = index_lock_path(node.wt)
    lock.write_text("")
    node.write("d.txt")
    before = node.head()
    with pytest.raises(IndexLocked) as info:
        node.commit("add d")
    assert f"pid {proc.pid}" in str(info.value) and str(lock) in str(info.value)
    assert lock.exists() and node.head() == before
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)
    assert node.commit("add d").outcome.sha == node.head() != before
    assert not lock.exists()


def test_two_commits_at_once_take_turns(tmp_path: Path) -> None:
    """Two ``fractal commit`` runs started together in one worktree (each linting for a
    while, then staging) both succeed: the second waits for the first's turn."""
    node = make_node(tmp_path)
    lint = node.paths.node_dir / "scripts" / "lint.sh"
    lint.parent.mkdir(parents=True, exist_ok=True)
    lint.write_text("sleep 0.3\n")
    node.write("e.txt")
    node.write("f.txt")
    before = node.head()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda text: node.commit(text), ["first", "second"]))
    shas = [r.outcome.sha for r in results]
    assert shas.count(None) == 1 and node.head() in shas  # one commit took both files
    assert {"e.txt", "f.txt"} <= set(node.files()) and node.head() != before
    assert not index_lock_path(node.wt).exists()


def test_a_commit_turn_held_too_long_is_a_clear_error(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    with commit_turn(node.wt), pytest.raises(IndexLocked) as info, \
            commit_turn(node.wt, wait=0.2):
        pass
    assert "another commit has been running" in str(info.value)
    with commit_turn(node.wt, wait=0.2):  # released: free again
        pass


@pytest.mark.parametrize("make", ["fifo", "directory", "dangling link"])
def test_a_commit_lock_that_is_not_a_file_is_a_clear_error(tmp_path: Path, make: str) -> None:
    node = make_node(tmp_path)
    lock = Path(git(node.wt, "rev-parse", "--path-format=absolute", "--git-path",
                    "fractal-commit.lock"))
    lock.unlink(missing_ok=True)  # the node's seed commit left the regular one
    {"fifo": os.mkfifo, "directory": Path.mkdir,
     "dangling link": lambda p: p.symlink_to(tmp_path / "gone" / "x")}[make](lock)
    node.write("g.txt")
    with pytest.raises(IndexLocked) as info:
        node.commit("add g")
    assert "commit lock" in str(info.value) and "remove it and retry" in str(info.value)


def test_the_turn_outlasts_a_healthy_commit() -> None:
    """A waiting commit gives up only after the longest a healthy one may take."""
    assert COMMIT_TURN_WAIT >= LINT_TIMEOUT + PUSH_TIMEOUT


def test_the_backstop_waits_for_a_running_commit(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    node.write("h.txt")
    before = node.head()
    with ThreadPoolExecutor(max_workers=1) as pool:
        with commit_turn(node.wt):
            landed = pool.submit(backstop_commit, node.wt, subject="main.a: backstop",
                                 branch="main.a")
            with pytest.raises(FutureTimeout):
                landed.result(timeout=0.5)  # held: the backstop must still be waiting
            assert node.head() == before
        assert landed.result(timeout=30) == node.head() != before
    assert "h.txt" in node.files()


# --- the database and tmp/ while another process writes ------------------------------------

WRITER = """\
import pathlib, sqlite3, sys, time
db, scratch, ready = sys.argv[1:4]
con = sqlite3.connect(db, isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA wal_autocheckpoint=0")
con.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
i = 0
while True:
    con.execute("INSERT INTO t VALUES (?)", (i,))
    pathlib.Path(scratch, f"s{i % 5}.txt").write_text(str(i))
    i += 1
    if i == 20:
        pathlib.Path(ready).write_text("ok")
    time.sleep(0.002)
"""


def test_db_sidecars_and_tmp_never_reach_a_commit_while_written(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    (node.wt / "data").mkdir()
    scratch = node.paths.node_dir / "tmp"
    scratch.mkdir(parents=True)
    ready = tmp_path / "ready"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(node.wt / "data" / "app.db"),
                               str(scratch), str(ready)], cwd=node.wt)
    try:
        wait_until(lambda: ready.exists() and (node.wt / "data" / "app.db-wal").exists()
                   and (node.wt / "data" / "app.db-shm").exists(), 15, message="db writer")
        for i in range(4):
            node.write(f"src/m{i}.py", f"x = {i}\n")
            outcome = node.commit(f"add module {i}").outcome
            assert outcome.files == (f"src/m{i}.py",)
        assert writer.poll() is None  # it really wrote all along
    finally:
        writer.terminate()
        writer.wait(timeout=10)
    every = git(node.wt, "log", "--name-only", "--format=", "main.a").splitlines()
    assert not [p for p in every if ".db" in p or "/tmp/" in p]


# --- relative core.hooksPath in a linked worktree ---------------------------------------------

def _hooks(log: Path, *, commit: bool, path: str = ".githooks") -> Callable[[Path], None]:
    """Prepare a repo whose pre-commit hook (in ``.githooks``) logs its working directory."""

    def prepare(repo: Path) -> None:
        hook = repo / ".githooks" / "pre-commit"
        hook.parent.mkdir()
        hook.write_text(f'#!/bin/sh\nprintf "%s\\n" "$PWD" >> "{log}"\n')
        hook.chmod(0o755)
        if commit:
            git(repo, "add", ".githooks")
            git(repo, "commit", "-q", "-m", "hooks")
        git(repo, "config", "core.hooksPath", path)

    return prepare


def test_committed_relative_hooks_path_runs_in_the_worktree(tmp_path: Path) -> None:
    log = tmp_path / "hook.log"
    node = make_node(tmp_path, prepare=_hooks(log, commit=True))
    log.unlink(missing_ok=True)
    node.write("e.txt")
    outcome = node.commit("add e").outcome
    assert outcome.sha and not outcome.warnings
    assert log.read_text().splitlines() == [str(node.wt)]


def test_relative_hooks_path_missing_from_the_worktree_runs_the_main_ones(
        tmp_path: Path) -> None:
    log = tmp_path / "hook.log"
    node = make_node(tmp_path, prepare=_hooks(log, commit=False))  # never committed
    assert not (node.wt / ".githooks").exists()
    log.unlink(missing_ok=True)
    node.write("f.txt")
    outcome = node.commit("add f").outcome
    assert outcome.sha
    assert any("core.hooksPath '.githooks'" in n for n in outcome.notices)
    assert log.read_text().splitlines() == [str(node.wt)]


def test_relative_hooks_path_found_nowhere_is_reported(tmp_path: Path) -> None:
    node = make_node(tmp_path, prepare=lambda repo: git(repo, "config", "core.hooksPath",
                                                         ".nohooks"))
    node.write("g.txt")
    outcome = node.commit("add g").outcome
    assert outcome.sha
    assert any("core.hooksPath '.nohooks'" in w and "no hooks" in w for w in outcome.warnings)
