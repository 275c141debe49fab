"""Token usage on step rows (migration 0002): NULL until reported, the last report wins,
written on open and closed rows alike, readable by the ledger and the fast reader."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command

from fractal.store import reader
from fractal.store.ledger import Ledger
from fractal.store.schema import alembic_config, current_revision

NODE = "main.codex"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "tree" / "fractal.db")


def _step(ledger: Ledger) -> int:
    run = ledger.open_run(NODE, agent="codex", max_cost=None, parent_run_id=None)
    it = ledger.open_iteration(NODE, run, 1, agent="codex", model=None)
    return ledger.open_step(node=NODE, run_id=run, iter_id=it, step=1, step_name="PLAN",
                            agent="codex", model=None, session=None)


def test_usage_is_null_until_reported_and_the_last_report_wins(ledger: Ledger) -> None:
    step_id = _step(ledger)
    row = ledger.step(step_id)
    assert row is not None
    assert (row.input_tokens, row.cached_input_tokens, row.output_tokens) == (None, None, None)
    ledger.set_step_usage(step_id, 1000, 0, 100)
    ledger.set_step_usage(step_id, 2000, 500, 200)
    open_row, = reader.open_steps(ledger.db_path, NODE)
    assert (open_row.input_tokens, open_row.cached_input_tokens,
            open_row.output_tokens) == (2000, 500, 200)
    ledger.close_step(step_id, "completed", 0, "")
    ledger.set_step_usage(step_id, 2100, 500, 210)  # a late figure still lands
    row = ledger.step(step_id)
    assert row is not None
    assert (row.input_tokens, row.cached_input_tokens, row.output_tokens) == (2100, 500, 210)
    assert row.cost is None  # tokens are not dollars: cost stays unknown


def test_0002_upgrades_a_0001_database_keeping_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    cfg = alembic_config(db)
    command.upgrade(cfg, "0001")
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO runs (node, status, started_at) VALUES ('n', 'active', 't')")
        conn.execute("INSERT INTO steps (node, run_id, step, step_name, status, started_at) "
                     "VALUES ('n', 1, 1, 'A', 'active', 't')")
    command.upgrade(cfg, "0002")
    assert current_revision(db) == "0002"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT step_name, input_tokens, output_tokens FROM steps"
                            ).fetchall() == [("A", None, None)]
    command.downgrade(cfg, "0001")
    with sqlite3.connect(db) as conn:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
        assert "input_tokens" not in columns
        assert conn.execute("SELECT step_name FROM steps").fetchall() == [("A",)]


def test_session_usage_sums_the_sessions_attempts(ledger: Ledger) -> None:
    first, second, other = _step(ledger), _step(ledger), _step(ledger)
    assert ledger.session_usage(NODE, "t-1") is None
    for step_id, session in ((first, "t-1"), (second, "t-1"), (other, "t-2")):
        ledger.set_step_session(step_id, session)
    assert ledger.session_usage(NODE, "t-1") is None  # sessions without tokens: unknown
    ledger.set_step_usage(first, 2000, 0, 200)
    ledger.set_step_usage(second, 2000, 100, 200)
    ledger.set_step_usage(other, 5, 5, 5)
    assert ledger.session_usage(NODE, "t-1") == (4000, 100, 400)
    assert ledger.session_usage("main.elsewhere", "t-1") is None
