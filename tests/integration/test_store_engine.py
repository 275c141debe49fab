"""The engine factory: pragmas on every connection, BEGIN IMMEDIATE, one engine per path."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from fractal.errors import StoreError
from fractal.store.engine import open_engine
from fractal.store.ledger import Ledger


@pytest.mark.parametrize(
    ("pragma", "expected"),
    [
        ("journal_mode", "wal"),
        ("foreign_keys", 1),
        ("busy_timeout", 30000),
        ("synchronous", 1),  # NORMAL
    ],
)
def test_every_connection_gets_the_pragmas(tmp_path: Path, pragma: str, expected: object) -> None:
    engine = open_engine(tmp_path / "fractal.db")
    # Two pooled DBAPI connections held at once: each was set up on connect.
    first, second = engine.raw_connection(), engine.raw_connection()
    try:
        for raw in (first, second):
            cursor = raw.cursor()
            cursor.execute(f"PRAGMA {pragma}")
            row = cursor.fetchone()
            assert row is not None and row[0] == expected
    finally:
        first.close()
        second.close()


def test_open_engine_creates_the_directory_and_caches_per_resolved_path(tmp_path: Path) -> None:
    db = tmp_path / "deep" / "er" / "fractal.db"
    engine = open_engine(db)
    assert db.is_file()
    os.symlink(tmp_path / "deep", tmp_path / "alias")
    assert open_engine(tmp_path / "alias" / "er" / "fractal.db") is engine
    assert open_engine(tmp_path / "deep" / "er" / ".." / "er" / "fractal.db") is engine
    assert open_engine(tmp_path / "other.db") is not engine


def test_a_transaction_holds_the_write_lock_from_its_first_statement(tmp_path: Path) -> None:
    """BEGIN IMMEDIATE: even a read-only transaction blocks other writers until it ends."""
    db = tmp_path / "fractal.db"
    engine = open_engine(db)
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM nodes").scalar()
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
            # Readers are never blocked (WAL).
            assert other.execute("SELECT count(*) FROM nodes").fetchone() == (0,)
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()


def test_foreign_keys_are_enforced(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "fractal.db")
    with pytest.raises(StoreError, match="FOREIGN KEY"):
        ledger.open_iteration("main.x", 999, 1, agent=None, model=None)
    run = ledger.open_run("main.x", agent=None, max_cost=None, parent_run_id=None)
    with pytest.raises(StoreError, match="FOREIGN KEY"):
        ledger.open_step(node="main.x", run_id=run, iter_id=999, step=1, step_name="PLAN",
                         agent=None, model=None, session=None)


def test_a_rolled_back_transaction_leaves_nothing(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "fractal.db")
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO nodes (node, status, created_at) VALUES ('main.a', 'idle', 'x')")
        raise RuntimeError("abort")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM nodes").scalar() == 0


def test_text_that_is_not_utf8_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    from fractal.domain.errors import InvalidValue
    from fractal.store.registry import Registry

    db = tmp_path / "fractal.db"
    registry = Registry(db)
    with pytest.raises(InvalidValue, match=r"not valid UTF-8.*nothing was written"):
        registry.register_node("main.bad", parent=None, title="bad\udcff", worktree=None)
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT COUNT(*) FROM nodes WHERE node = 'main.bad'").fetchone() == (0,)
    finally:
        con.close()
