"""The fast read path: no SQLAlchemy, read-only, schema on first use, reads during writes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from alembic import command

from fractal.errors import StoreError
from fractal.store import reader
from fractal.store.engine import open_engine
from fractal.store.ledger import Ledger
from fractal.store.schema import HEAD_REVISION, alembic_config, current_revision

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses

REPO = Path(__file__).resolve().parents[2]
NODE = "main.reader"


def test_reads_never_import_sqlalchemy_or_alembic(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    ledger = Ledger(db)
    ledger.register_node(NODE, parent="main", title=None, worktree=None)
    ledger.open_run(NODE, agent=None, max_cost=None, parent_run_id=None)
    probe = textwrap.dedent("""
        import json, sys
        from pathlib import Path
        from fractal.store import reader
        db = Path(sys.argv[1])
        counts = [len(reader.activity(db, None, 10)), len(reader.node_rows(db)),
                  reader.last_run(db, "main.reader") is not None]
        heavy = sorted(m for m in ("sqlalchemy", "alembic") if m in sys.modules)
        print(json.dumps({"counts": counts, "heavy": heavy}))
    """)
    out = subprocess.run([sys.executable, "-c", probe, str(db)], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert json.loads(out) == {"counts": [1, 1, True], "heavy": []}


@pytest.mark.sqlite_only("a missing file is created: SQLite's case (a PostgreSQL database is made by its owner)")
def test_first_read_creates_a_missing_database(tmp_path: Path) -> None:
    db = tmp_path / "new" / "fractal.db"
    assert reader.node_rows(db) == []
    assert current_revision(db) == HEAD_REVISION


@pytest.mark.sqlite_only("downgrades the file with Alembic by path")
def test_a_database_behind_head_is_upgraded_before_reading(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    cfg = alembic_config(db)
    command.upgrade(cfg, "head")
    command.downgrade(cfg, "base")
    assert reader.activity(db, None, None) == []
    assert current_revision(db) == HEAD_REVISION


def test_point_reads_match_the_ledger(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    ledger = Ledger(db)
    ledger.register_node(NODE, parent="main", title="Reader", worktree="/w",
                         caps={"max_cost": 4})
    run = ledger.open_run(NODE, agent="claude", max_cost=4.0, parent_run_id=None)
    step = ledger.open_step(node=NODE, run_id=run, iter_id=None, step=1, step_name="PLAN",
                            agent="claude", model=None, session=None, gated=True)
    assert reader.node_row(db, NODE) == ledger.node(NODE)
    assert reader.node_row(db, "main.ghost") is None
    assert reader.node_rows(db) == ledger.nodes()
    assert reader.last_run(db, NODE) == ledger.last_run(NODE)
    assert reader.last_run(db, "main.ghost") is None
    assert reader.open_steps(db, NODE) == ledger.open_steps(NODE)
    assert [s.step_id for s in reader.open_steps(db, NODE)] == [step]


@pytest.mark.sqlite_only("the writer is an SQLAlchemy engine on the file (WAL); PostgreSQL's MVCC reads are the server's")
def test_reads_proceed_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    ledger = Ledger(db)
    ledger.register_node(NODE, parent=None, title=None, worktree=None)
    with open_engine(db).begin() as conn:
        conn.exec_driver_sql("UPDATE nodes SET status = 'active'")
        (row,) = reader.node_rows(db)  # WAL: sees the last committed state at once
        assert row.status == "idle"
    (row,) = reader.node_rows(db)
    assert row.status == "active"


@pytest.mark.sqlite_only("a file that is not a database is SQLite's case")
def test_an_unreadable_file_raises_store_error(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    db.write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreError):
        reader.node_rows(db)
