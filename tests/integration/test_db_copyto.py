"""``fractal db copy-to URL`` through the real CLI: a SQLite tree with a few nodes and
runs moves into an empty PostgreSQL database with its ids; the refusals say what to do.
Runs on ``--backend=postgres`` (the test's database is the target) and is skipped on
SQLite alone."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fractal.store import backend, pgdriver
from fractal.store.ledger import Ledger
from tests import ledgersql
from tests.helpers import make_repo
from tests.trees import run_cli

pytestmark = pytest.mark.backend

TABLES = ("nodes", "runs", "iterations", "steps", "events")


@pytest.fixture
def target(monkeypatch: pytest.MonkeyPatch) -> str:
    """The test's empty PostgreSQL database URL; the process itself goes back to SQLite."""
    if ledgersql.backend() != "postgres":
        pytest.skip("copies into PostgreSQL (run with --backend=postgres or both)")
    url = os.environ["FRACTAL_DATABASE_URL"]
    monkeypatch.delenv("FRACTAL_DATABASE_URL")
    backend.forget()
    return url


def _sqlite_tree(repo: Path) -> Path:
    """A SQLite tree rooted in ``repo`` with three nodes, runs, an iteration, a step and
    events, one run deleted so the ids have a gap; returns its database path."""
    run_cli(["init"], repo)
    db_path = repo / ".fractal" / "main" / "fractal.db"
    ledger = Ledger(db_path)
    for name in ("main.a", "main.b", "main.a.c"):
        ledger.register_node(name, parent=name.rsplit(".", 1)[0], title=name, worktree=None)
    runs = [ledger.open_run(n, agent="claude", max_cost=2.5, parent_run_id=None)
            for n in ("main.a", "main.b", "main.a.c")]
    iter_id = ledger.open_iteration("main.a", runs[0], 1, agent="claude", model=None)
    ledger.open_step(node="main.a", run_id=runs[0], iter_id=iter_id, step=1,
                     step_name="01-build", agent="claude", model=None, session=None)
    ledger.close_run(runs[2], "completed", 0, "")
    ledger.add_event("main.b", "note", actor="operator", run_id=runs[1])
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE nodes SET status = 'completed'")  # no node active
        conn.execute("DELETE FROM events WHERE event = 'note'")  # a gap in the event ids
    ledger.add_event("main.b", "note", actor="operator", run_id=runs[1])
    return db_path


def _sqlite_rows(db_path: Path, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_path) as conn:
        key = _key(table)
        return [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {key}")]


def _pg_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = pgdriver.connect(url)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def _key(table: str) -> str:
    return {"nodes": "node_id", "runs": "run_id", "iterations": "iter_id",
            "steps": "step_id", "events": "event_id"}[table]


def test_copy_to_moves_the_ledger_with_its_ids_and_the_tree_reads_it_after(
        tmp_path: Path, target: str) -> None:
    repo = make_repo(tmp_path / "repo")
    db_path = _sqlite_tree(repo)
    env = {k: v for k, v in os.environ.items() if k != "FRACTAL_DATABASE_URL"}

    running = run_cli(["db", "copy-to", target], repo, env=env, check=False)
    assert running.returncode == 1, running.stderr
    assert "fractal pause" in running.stderr  # says how
    assert "database" not in json.loads((repo / ".fractal/main/config.json").read_text())

    run_cli(["pause"], repo, env=env)
    with_password = target.replace("://postgres@", "://postgres:hunter2@")
    refused = run_cli(["db", "copy-to", with_password], repo, env=env, check=False)
    assert refused.returncode == 1 and "~/.pgpass" in refused.stderr
    assert "hunter2" not in (repo / ".fractal/main/config.json").read_text()

    before = {t: _sqlite_rows(db_path, t) for t in TABLES}
    done = run_cli(["db", "copy-to", target], repo, env=env)
    assert "events" in done.stdout and str(db_path) in done.stderr
    config = json.loads((repo / ".fractal/main/config.json").read_text())
    assert config["database"] == target
    assert {t: _sqlite_rows(db_path, t) for t in TABLES} == before  # the file kept as it was

    for table in TABLES:
        columns = [c[1] for c in sqlite3.connect(db_path).execute(f"PRAGMA table_info({table})")]
        got = _pg_rows(target, f"SELECT {', '.join(columns)} FROM {table} ORDER BY {_key(table)}")
        assert [r[0] for r in got] == [r[0] for r in before[table]], table  # ids kept
        assert len(got) == len(before[table]) and got, table
        assert got == before[table], table  # every value as SQLite held it

    # the tree now reads and writes PostgreSQL: a node registered after the copy is listed,
    # the SQLite file never sees it, and new ids follow the copied ones
    backend.forget()
    ledger = Ledger(db_path)
    ledger.register_node("main.d", parent="main", title=None, worktree=None)
    event = ledger.add_event("main.d", "note", actor="operator")
    assert event == max(r[0] for r in before["events"]) + 1
    listed = run_cli(["node", "list"], repo, env=env).stdout
    assert "main.d" in listed and "main.a.c" in listed
    assert _sqlite_rows(db_path, "nodes") == before["nodes"]

    assert _pg_rows(target, "SELECT COUNT(*) FROM latches") == [(1,)]  # still braked
    run_cli(["resume"], repo, env=env)
    assert _pg_rows(target, "SELECT COUNT(*) FROM latches") == [(0,)]

    again = run_cli(["db", "copy-to", target], repo, env=env, check=False)
    assert again.returncode == 1 and "already on PostgreSQL" in again.stderr


def test_copy_to_refuses_an_active_node_and_a_target_that_holds_rows(
        tmp_path: Path, target: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FRACTAL_DATABASE_URL"}
    first = make_repo(tmp_path / "first")
    run_cli(["init"], first, env=env)
    run_cli(["pause"], first, env=env)
    run_cli(["db", "copy-to", target], first, env=env)
    second = make_repo(tmp_path / "second")
    _sqlite_tree(second)
    run_cli(["pause"], second, env=env)
    db_path = second / ".fractal" / "main" / "fractal.db"
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE nodes SET status = 'active' WHERE node = 'main.b'")
    busy = run_cli(["db", "copy-to", target], second, env=env, check=False)
    assert busy.returncode == 1 and "main.b still active" in busy.stderr
    assert "fractal node list" in busy.stderr
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE nodes SET status = 'completed' WHERE node = 'main.b'")
    refused = run_cli(["db", "copy-to", target], second, env=env, check=False)
    assert refused.returncode == 1 and "already holds rows" in refused.stderr
    assert "empty database" in refused.stderr
    assert "database" not in json.loads((second / ".fractal/main/config.json").read_text())
