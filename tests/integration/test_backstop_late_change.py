"""A backstop given a status started ahead commits what ``git status`` shows at commit time.

The loop starts the backstop's status once the iteration's last agent is gone; a file
that changes after that (a writer the sweep cannot see, a person in the worktree) must
be in the commit exactly as when the backstop starts its own status, and the
conflict-marker refusal must hold for it too.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from fractal.errors import GitError
from fractal.workspace import nodedir
from fractal.workspace.backstop import backstop_commit
from fractal.workspace.commit_lock import commit_turn
from fractal.workspace.commit_types import UnresolvedConflict
from fractal.workspace.status_ahead import PendingStatus, start_worktree_status
from tests.helpers import gated_fsmonitor, git_with_identity, open_gate

CONFLICTED = "<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> other\n"


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git_with_identity(repo, "init", "-q", "-b", "main")
    git_with_identity(repo, "config", "user.name", "T")
    git_with_identity(repo, "config", "user.email", "t@e.invalid")
    (repo / "a.txt").write_text("a\n")
    git_with_identity(repo, "add", "a.txt")
    git_with_identity(repo, "commit", "-q", "-m", "one")
    # Not racily clean: a status started ahead then leaves the index alone (its answer
    # is used, not voided by git's own index refresh).
    past = time.time() - 100
    os.utime(repo / "a.txt", (past, past))
    git_with_identity(repo, "update-index", "-q", "--really-refresh")
    return repo


def _finished_status(repo: Path, early: str) -> PendingStatus:
    """A status started ahead whose git process has answered (its answer is kept)."""
    pending = start_worktree_status(repo)
    assert pending is not None
    assert pending.result() == ([early] if early else [], True)
    return pending


def _index_and_head(repo: Path) -> tuple[str, str]:
    return git_with_identity(repo, "rev-parse", "HEAD"), git_with_identity(repo, "ls-files", "-s")


def _backstop_in_thread(repo: Path) -> tuple[threading.Thread, list[BaseException | str | None]]:
    """(a thread to start, what it ends with): ``backstop_commit`` of ``repo``'s ``main``,
    its sha or None, or the exception it raised, handed to the test thread."""
    outcome: list[BaseException | str | None] = []

    def run() -> None:
        try:
            outcome.append(backstop_commit(repo, subject="backstop", branch="main"))
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    return threading.Thread(target=run, daemon=True), outcome


@pytest.mark.parametrize("early", ["", "a.txt"], ids=["clean", "a-changed"])
@pytest.mark.parametrize("ahead", [False, True], ids=["own-status", "status-ahead"])
def test_a_file_written_after_the_status_started_is_committed(
        tmp_path: Path, early: str, ahead: bool) -> None:
    repo = _repo(tmp_path)
    if early:
        (repo / early).write_text("early\n")
    pending = _finished_status(repo, early) if ahead else None
    (repo / "late.txt").write_text("late\n")  # after the status ran
    sha = backstop_commit(repo, subject="backstop", branch="main", pending=pending)
    assert sha is not None
    committed = git_with_identity(repo, "show", "--name-only", "--format=", sha).split()
    assert sorted(committed) == sorted(filter(None, [early, "late.txt"]))
    assert git_with_identity(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize("early", ["", "a.txt"], ids=["clean", "a-changed"])
@pytest.mark.parametrize("ahead", [False, True], ids=["own-status", "status-ahead"])
def test_a_late_file_with_conflict_markers_is_refused_and_nothing_changes(
        tmp_path: Path, early: str, ahead: bool) -> None:
    repo = _repo(tmp_path)
    if early:
        (repo / early).write_text("early\n")
    before = _index_and_head(repo)
    pending = _finished_status(repo, early) if ahead else None
    (repo / "late.txt").write_text(CONFLICTED)
    with pytest.raises(UnresolvedConflict) as caught:
        backstop_commit(repo, subject="backstop", branch="main", pending=pending)
    assert "late.txt" in caught.value.reason
    assert _index_and_head(repo) == before


def test_a_file_written_while_the_backstop_waits_for_its_turn_is_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``fractal commit`` holding the turn: the backstop's own status answers before the
    turn is free, and a file written meanwhile (a lint.sh rewrite, a person) is staged by
    ``add --all`` all the same, so it must be checked for conflict markers too."""
    repo = _repo(tmp_path)
    (repo / "a.txt").write_text("early\n")
    before = _index_and_head(repo)
    started, gate = gated_fsmonitor(monkeypatch, tmp_path)
    worker, outcome = _backstop_in_thread(repo)
    with commit_turn(repo):  # a `fractal commit` in the worktree
        worker.start()
        with open(started, encoding="utf-8") as fh:  # the backstop's status is running
            git_pid = psutil.Process(int(fh.read())).ppid()
        open_gate(gate)
        os.waitid(os.P_PID, git_pid, os.WEXITED | os.WNOWAIT)  # it answered: a.txt
        (repo / "late.txt").write_text(CONFLICTED)
    worker.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], UnresolvedConflict), outcome
    assert "late.txt" in outcome[0].reason
    assert _index_and_head(repo) == before


_LS_FILES_WAITS = """#!/bin/bash
# core.fsmonitor: the backstop's `git ls-files --others` (after its status answered, before
# `add --all`) says it runs and waits for the gate; every other git answers at once.
if [ ! -e "{once}" ] && tr '\\0' ' ' < /proc/$PPID/cmdline | grep -q ls-files; then
    : > "{once}"
    exec 3<>"{gate}"
    echo $$ > "{started}"
    read -t 20 -u 3 line
fi
exit 1
"""


def test_a_file_written_between_the_status_and_the_staging_is_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No status started ahead, no other commit: a conflicted file written after the
    backstop's own status answered and before ``add --all`` ran is refused like any other."""
    repo = _repo(tmp_path)
    (repo / "a.txt").write_text("early\n")
    before = _index_and_head(repo)
    started, gate = gated_fsmonitor(monkeypatch, tmp_path, _LS_FILES_WAITS)
    worker, outcome = _backstop_in_thread(repo)
    worker.start()
    with open(started, encoding="utf-8") as fh:  # the status answered: a.txt
        fh.read()
    (repo / "late.txt").write_text(CONFLICTED)
    open_gate(gate)
    worker.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], UnresolvedConflict), outcome
    assert "late.txt" in outcome[0].reason
    assert _index_and_head(repo) == before


def test_a_branch_switched_while_the_backstop_waits_for_its_turn_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``fractal commit`` holds the turn; meanwhile HEAD moves to another branch. The
    backstop checks the branch once it holds the turn, so it refuses instead of
    committing the node's work onto the other branch."""
    repo = _repo(tmp_path)
    (repo / "a.txt").write_text("work\n")
    waiting = threading.Event()
    real_sleep = time.sleep

    class _Time:  # the turn's poll: says when the backstop first waits for it
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            waiting.set()
            real_sleep(seconds)

    monkeypatch.setattr(nodedir, "time", _Time)
    worker, outcome = _backstop_in_thread(repo)
    with commit_turn(repo):  # a `fractal commit` in the worktree
        worker.start()
        assert waiting.wait(30)
        git_with_identity(repo, "checkout", "-q", "-b", "other")
    worker.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], GitError), outcome
    assert "not main" in str(outcome[0])
    assert git_with_identity(repo, "rev-parse", "other") == git_with_identity(repo, "rev-parse", "main")
    assert (repo / "a.txt").read_text() == "work\n"
