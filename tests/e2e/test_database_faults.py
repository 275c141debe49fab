"""The tree database's faults through the real CLI and a real supervisor: a lock held by
another process is waited out in the same run; a missing database is refused with the
recovery, never recreated; ``fractal doctor`` reports what disagrees and how to repair it."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from fractal.store.schema import HEAD_REVISION
from tests.dblock import held
from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

pytestmark = pytest.mark.e2e

# The first try waits 1 s (not 30 s), so a lock held a few seconds outlives it.
SHORT_FIRST_TRY = {**os.environ, "FRACTAL_DB_BUSY_S": "1", "FRACTAL_DB_LOCK_WAIT_S": "120"}


def test_a_supervisor_waits_out_a_held_lock_and_keeps_its_run(tree: Tree, tmp_path: Path) -> None:
    go = tmp_path / "go"
    tree.node("l", {"01-A.md": f"[stub:wait-file={go}]", "02-B.md": "[stub:write=b.txt:b]"},
              "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "l", env=SHORT_FIRST_TRY)
    tree.wait_running("l", "A")
    ((run_id,),) = tree.sql("SELECT run_id FROM runs WHERE node = 'main.l'")
    pane_log = tree.node_dir("l") / "pane.log"
    with held(tree.db):
        go.touch()  # A ends: closing its row now waits on the lock
        # the notice comes a first try (1 s) after the agent's end; a loaded machine's
        # stub poll and supervisor wake can take tens of seconds more
        wait_until(lambda: "locked by another process; waiting for it" in pane_log.read_text(),
                   timeout=90, message="the pane to say the supervisor waits for the database")
        assert tree.status("l") == "active"
    assert tree.wait_settled("l") == "completed"
    assert tree.sql("SELECT run_id, status FROM runs WHERE node = 'main.l'") == [
        (run_id, "completed")]
    assert tree.sql("SELECT step_name, status FROM steps WHERE node = 'main.l' "
                    "ORDER BY step_id") == [("A", "completed"), ("B", "completed")]
    assert pane_log.read_text().count("locked by another process; waiting") == 1


def test_a_missing_database_is_refused_with_the_recovery_and_not_recreated(tree: Tree) -> None:
    tree.node("a")
    tree.node("b")
    db = tree.db
    tree.close_readers()
    for leftover in (db, db.with_name("fractal.db-wal"), db.with_name("fractal.db-shm")):
        leftover.unlink(missing_ok=True)
    for verb in (["node", "list"], ["node", "status", "a"], ["node", "delete", "a"], ["init"]):
        out = tree.cli(*verb, check=False)
        assert out.returncode == 1, (verb, out.stderr)
        assert "database" in out.stderr and "is missing" in out.stderr, (verb, out.stderr)
        assert "restore" in out.stderr and "fractal init" in out.stderr
        assert not db.exists(), verb
    doctor = tree.cli("doctor", check=False)
    assert doctor.returncode == 1
    assert doctor.stdout.splitlines()[0].startswith("database .fractal/main/fractal.db: is missing")

    for name in ("main.a", "main.b"):  # the recovery that starts the tree over
        git(tree.repo, "worktree", "remove", "--force", f".worktrees/{name}")
        git(tree.repo, "branch", "-D", name)
    tree.cli("init")
    assert db.is_file()
    assert tree.cli("doctor").returncode == 0


def test_doctor_reports_each_disagreement_with_its_repair(tree: Tree) -> None:
    tree.node("a")
    tree.node("b")
    tree.node("c")
    clean = tree.cli("doctor")
    assert clean.stdout == "" and "3 nodes" in clean.stderr
    shutil.rmtree(tree.worktree("a"))  # a worktree removed behind fractal's back
    git(tree.repo, "worktree", "prune")
    shutil.rmtree(tree.node_dir("b"))
    git(tree.repo, "branch", "stray", "main")
    git(tree.repo, "branch", "main.stray", "main")
    git(tree.repo, "worktree", "add", "-q", ".worktrees/main.loose", "-b", "main.loose")
    with sqlite3.connect(tree.db) as con:
        con.execute("UPDATE alembic_version SET version_num = '0001'")
        # recorded active under a supervisor that is not there (not this pid's process)
        con.execute("UPDATE nodes SET status = 'active', supervisor_pid = ?, "
                    "supervisor_started = 1.0 WHERE node = 'main.c'", (os.getpid(),))
    before = tree.sql("SELECT count(*) FROM events")
    tree.close_readers()

    out = tree.cli("doctor", check=False)
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines == [
        f"database .fractal/main/fractal.db: is at schema 0001, this fractal's is {HEAD_REVISION}; "
        "repair: `fractal node list` (any command that reads the tree upgrades it)",
        "main.a: its worktree .worktrees/main.a is gone; repair: `git worktree add "
        ".worktrees/main.a main.a` brings it back, or `fractal node delete main.a` "
        "deregisters the node",
        "main.b: its node dir .worktrees/main.b/.fractal/main.b is gone; repair: "
        "`git -C .worktrees/main.b checkout HEAD -- .fractal/main.b`",
        "main.c: is recorded active but its supervisor is gone; repair: `fractal node status "
        "main.c` (the read parks its run), then `fractal node resume main.c`",
        "worktree .worktrees/main.loose: no registered node has it; repair: "
        "`git worktree remove --force .worktrees/main.loose`",
        "branch main.loose: no registered node has it; repair: `git branch -D main.loose`",
        "branch main.stray: no registered node has it; repair: `git branch -D main.stray`",
    ]
    assert "7 findings" in out.stderr
    # it only reads: the stamp is not upgraded, nothing is recorded, nothing moved
    assert tree.sql("SELECT version_num FROM alembic_version") == [("0001",)]
    assert tree.sql("SELECT count(*) FROM events") == before
    assert (tree.status("a"), tree.status("c")) == ("idle", "active")


def test_a_writing_verb_waits_out_a_held_lock_and_says_so_once(tree: Tree) -> None:
    tree.node("a")
    with held(tree.db, 3.0):  # let go 3 s on, past the 1 s first try
        out = tree.cli("node", "init", "b", env=SHORT_FIRST_TRY)
    assert out.stderr.count("is locked by another process; waiting for it (up to 120s)") == 1
    assert tree.status("b") == "idle"
