"""A database locked past the wait's bound parks the run (``interrupted: database
locked``), nothing committed, and a resume continues it in the same run; when even the
park is refused, the supervisor writes nothing more and no row ends ``exited``.
In-process, with the fake clock and the scripted launcher: the lock error is raised at a
step's spawn, as a write that waited in vain raises it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.store.ledger import Ledger
from fractal.store.lockwait import DatabaseLocked, locked_error
from tests.helpers import git
from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


def _locked(db: Path) -> DatabaseLocked:
    return locked_error(db, 600.0)


def test_a_lock_past_the_bound_parks_the_run_and_resume_continues_it(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("n", {"01-A.md": "[stub:write=a.txt:a]", "02-B.md": "[stub:write=b.txt:b]"},
           "--no-sync", "--max-iters", "1")
    before = git(t.repo, "rev-parse", "main.n")

    def lock_out() -> None:
        raise _locked(t.db)
    t.during("(B)", lock_out)
    assert t.run("n") == 1
    assert t.status("n") == "paused"
    assert t.steps("n") == [("A", "completed", 0, ""),
                            ("B", "paused", 1, "interrupted: database locked")]
    assert t.sql("SELECT status, ended_at FROM runs") == [("active", None)]
    assert t.sql("SELECT status, ended_at FROM iterations") == [("active", None)]
    assert git(t.repo, "rev-parse", "main.n") == before  # nothing committed
    assert t.sql("SELECT subject FROM messages WHERE node = 'main.n'") == [
        ("run 1 parked: interrupted: database locked",)]
    assert t.sql("SELECT metadata FROM events WHERE node = 'main.n' AND event = 'pause'") == [
        ("parked interrupted: database locked",)]
    pane = t.pane()
    assert "stayed locked by another process" in pane and "fractal node resume main.n" in pane

    assert t.run("n", resume=True) == 0
    assert t.sql("SELECT run_id, status FROM runs") == [(1, "completed")]
    assert t.iterations("n") == [(1, "completed", 0, "")]
    assert [s[:2] for s in t.steps("n")] == [("A", "completed"), ("B", "paused"),
                                            ("B", "completed")]
    assert git(t.repo, "show", "main.n:b.txt") == "b"


def test_a_park_refused_for_the_lock_leaves_the_run_open_for_the_heal(
        loop_tree: LoopTree, monkeypatch: pytest.MonkeyPatch) -> None:
    t = loop_tree
    t.node("m", {"01-A.md": "[stub:write=a.txt:a]"}, "--no-sync", "--max-iters", "1")

    def lock_out() -> None:
        def refuse(*_args: object, **_kwargs: object) -> None:
            raise _locked(t.db)
        for name in ("move", "open_run_of", "set_supervisor", "checkpoint"):
            monkeypatch.setattr(Ledger, name, refuse)
        raise _locked(t.db)
    t.during("(A)", lock_out)
    assert t.run("m") == 1
    monkeypatch.undo()
    assert t.status("m") == "active"  # the heal parks it once its supervisor is gone
    assert t.sql("SELECT status FROM runs") == [("active",)]
    assert t.sql("SELECT count(*) FROM steps WHERE status = 'exited'") == [(0,)]
    assert "stays active with no supervisor" in t.pane()
