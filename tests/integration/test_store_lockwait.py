"""A busy database is waited for: the seam's writes and reads, and the fast reader, wait
out another process's lock past the first try's timeout, up to the bound; past the bound
the refusal explains itself and nothing is written.

The lock is real: a separate process holds ``BEGIN IMMEDIATE`` (or, to block readers too,
a write under ``locking_mode=EXCLUSIVE``) on the file. The first try's timeout is cut from
30 s to 1 s (``LockWait.first``) so a hold of a few seconds stands for one past it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store import db, lockwait, reader
from fractal.store.ledger import Ledger
from fractal.store.lockwait import DatabaseLocked, LockWait
from tests.dblock import held


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    """A ledger whose first try waits 1 s and whose bound is 30 s; notices collected."""
    monkeypatch.setattr(lockwait, "LOCK_WAIT", LockWait(first=1.0, bound=30.0))
    db.close_connections()  # connections made with the old first-try timeout
    told: list[str] = []
    lockwait.set_wait_notice(told.append)
    made = Ledger(tmp_path / "fractal.db")
    made.told = told  # type: ignore[attr-defined]
    yield made
    lockwait.set_wait_notice(None)
    db.close_connections()


def test_a_write_waits_past_the_first_timeout_and_goes_through(ledger: Ledger) -> None:
    with held(ledger.db_path, 3.0) as since:
        ledger.register_node("main.a", parent="main", title=None, worktree=None)
        waited = time.monotonic() - since
    assert waited > 2.0  # the old one-shot timeout (here 1 s) would have failed it
    row = ledger.node("main.a")
    assert row is not None and row.status.value == "idle"
    assert len(ledger.told) == 1  # type: ignore[attr-defined]
    assert "locked by another process; waiting for it" in ledger.told[0]  # type: ignore[attr-defined]


def test_a_write_past_the_bound_is_refused_with_why_and_nothing_is_written(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lockwait, "LOCK_WAIT", LockWait(first=1.0, bound=2.5))
    with held(ledger.db_path) as since, pytest.raises(DatabaseLocked) as refused:
        ledger.register_node("main.a", parent="main", title=None, worktree=None)
    assert time.monotonic() - since >= 1.5
    text = str(refused.value)
    assert "stayed locked by another process" in text and "nothing was written" in text
    assert "fuser" in text and "try again" in text
    assert ledger.node("main.a") is None
    ledger.register_node("main.a", parent="main", title=None, worktree=None)  # free again
    assert ledger.node("main.a") is not None


def test_a_read_waits_for_a_writer_holding_the_file_exclusively(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger.register_node("main.a", parent="main", title=None, worktree=None)
    monkeypatch.setattr(reader, "READ_BUSY_TIMEOUT_S", 0.5)
    db.close_connections()  # an exclusive holder needs the only open connection
    with held(ledger.db_path, 2.5, mode="exclusive") as since:
        rows = reader.node_rows(ledger.db_path)
        assert time.monotonic() - since > 1.5
    assert [r.node for r in rows] == ["main.a"]
    assert len(ledger.told) == 1  # type: ignore[attr-defined]


def test_an_idle_database_is_not_waited_for(ledger: Ledger) -> None:
    ledger.register_node("main.a", parent="main", title=None, worktree=None)
    assert ledger.node("main.a") is not None
    assert reader.node_row(ledger.db_path, "main.a") is not None
    assert ledger.told == []  # type: ignore[attr-defined]
