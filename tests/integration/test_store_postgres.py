"""What only a PostgreSQL ledger does: Alembic check on the server, the brake as a row,
the tree's advisory lock waited for and bounded, a URL's password kept out of files,
another host's node never healed from here. Each test runs on ``--backend=postgres``
(``make test`` chooses both) and is skipped on SQLite alone."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from alembic import command

from fractal.domain.errors import InvalidValue
from fractal.errors import StoreError
from fractal.lifecycle import heal
from fractal.lifecycle.trees import init_tree
from fractal.store import db, lockwait, pgdriver, pgschema
from fractal.store.ledger import Ledger
from fractal.tree import Tree
from tests import ledgersql
from tests.helpers import make_repo

pytestmark = pytest.mark.backend

NODE = "main.a"


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if ledgersql.backend() != "postgres":
        pytest.skip("a PostgreSQL ledger's behaviour (run with --backend=postgres or both)")


def test_alembic_check_reports_no_drift_on_postgres(tmp_path: Path) -> None:
    from alembic.config import Config

    from fractal.store.schema import migrations_dir

    url = os.environ["FRACTAL_DATABASE_URL"]
    pgschema.ensure_schema(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", pgschema.sqlalchemy_url(url))
    command.check(cfg)


def test_floats_keep_epoch_precision(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "fractal.db")
    ledger.register_node(NODE, parent="main", title=None, worktree=None)
    ledger.set_supervisor(NODE, 4242, 1796609688.123456)
    assert ledger.node(NODE).supervisor_started == 1796609688.123456


def test_the_brake_is_a_row_every_clone_sees(repo: Path) -> None:
    from fractal.control import clear_latch, latch_path, latched, set_latch

    init_tree(repo)
    tree = Tree(repo=repo, root="main")
    assert not latched(tree)
    set_latch(tree, "maintenance")
    assert latched(tree) and not latch_path(tree).exists()
    assert ledgersql.rows(tree.db_path, "SELECT reason FROM latches") == [("maintenance",)]
    assert clear_latch(tree) is True
    assert clear_latch(tree) is False
    assert not latched(tree)


def test_init_stores_the_url_without_its_password(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    url = os.environ["FRACTAL_DATABASE_URL"]
    with_password = url.replace("://postgres@", "://postgres:hunter2@")
    with pytest.raises(InvalidValue, match="password"):
        init_tree(repo, database=with_password, environ={})
    done = init_tree(repo, environ={"FRACTAL_DATABASE_URL": with_password})
    config = json.loads(done.tree.config_path.read_text())
    assert config["database"] == url
    assert "hunter2" not in done.tree.config_path.read_text()
    assert not done.tree.db_path.exists()


def test_a_write_waits_for_the_tree_lock_then_is_refused_past_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger(tmp_path / "fractal.db")
    ledger.register_node(NODE, parent="main", title=None, worktree=None)
    monkeypatch.setattr(lockwait, "LOCK_WAIT", lockwait.LockWait(first=0.2, bound=1.0))
    db.close_connections()  # new connections take the short first wait
    import psycopg

    holder = psycopg.connect(os.environ["FRACTAL_DATABASE_URL"], autocommit=True)
    try:
        holder.execute(f"BEGIN; SELECT pg_advisory_xact_lock({pgdriver.TREE_LOCK_KEY})")
        with pytest.raises(lockwait.DatabaseLocked):
            ledger.add_event(NODE, "x", actor="operator", status="completed")
        released = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
        released.start()
        monkeypatch.setattr(lockwait, "LOCK_WAIT", lockwait.LockWait(first=0.2, bound=30.0))
        ledger.add_event(NODE, "y", actor="operator", status="completed")  # waits, then writes
        released.join()
    finally:
        holder.close()
    events = ledgersql.rows(ledger.db_path, "SELECT event FROM events WHERE node = ?", NODE)
    assert events == [("y",)]


def test_another_hosts_active_node_is_never_healed_from_here(repo: Path) -> None:
    init_tree(repo)
    tree = Tree(repo=repo, root="main")
    ledger = Ledger(tree.db_path)
    ledger.register_node(NODE, parent="main", title=None, worktree=None, status="active")
    ledger.set_supervisor(NODE, 999_999, 1.0)  # no such process on this machine
    assert heal.crashed(tree, NODE) is True
    ledgersql.rows(tree.db_path, "UPDATE nodes SET host = 'elsewhere' WHERE node = ? "
                   "RETURNING node", NODE)
    assert heal.crashed(tree, NODE) is False


def test_a_one_statement_write_is_one_round_trip_and_still_waits_for_the_tree_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger(tmp_path / "fractal.db")
    ledger.register_node(NODE, parent="main", title=None, worktree=None)
    run = ledger.open_run(NODE, agent="x", max_cost=None, parent_run_id=None)
    step = ledger.open_step(node=NODE, run_id=run, iter_id=None, step=1, step_name="S",
                            agent="x", model=None, session=None)
    ledger.set_step_process(step, 4242, 1.5)  # BEGIN, the lock, the UPDATE, COMMIT: piped
    assert ledgersql.rows(ledger.db_path, "SELECT pgid, pgid_started FROM steps") == [
        (4242, 1.5)]
    monkeypatch.setattr(lockwait, "LOCK_WAIT", lockwait.LockWait(first=0.2, bound=1.0))
    db.close_connections()  # new connections take the short first wait
    import psycopg

    holder = psycopg.connect(os.environ["FRACTAL_DATABASE_URL"], autocommit=True)
    try:
        holder.execute(f"BEGIN; SELECT pg_advisory_xact_lock({pgdriver.TREE_LOCK_KEY})")
        with pytest.raises(lockwait.DatabaseLocked):
            ledger.close_step(step, "completed", 0, "")
        released = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
        released.start()
        monkeypatch.setattr(lockwait, "LOCK_WAIT", lockwait.LockWait(first=0.2, bound=30.0))
        assert ledger.close_step(step, "completed", 0, "")  # waits, then closes
        released.join()
    finally:
        holder.close()
    assert ledgersql.rows(ledger.db_path, "SELECT status FROM steps") == [("completed",)]
    assert ledger.close_step(step, "failed", 1, "") is False  # the fence holds, piped too


def test_a_one_statement_write_that_fails_leaves_nothing_and_the_connection_usable(
        tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "fractal.db")
    ledger.register_node(NODE, parent="main", title=None, worktree=None)
    with pytest.raises(StoreError), db.transaction(ledger.db_path, single=True) as tx:
        tx.run("UPDATE nodes SET status = NULL WHERE node = :node", {"node": NODE})
    with pytest.raises(StoreError, match="second statement"), \
            db.transaction(ledger.db_path, single=True) as tx:
        tx.run("UPDATE nodes SET title = 'one' WHERE node = :node", {"node": NODE})
        tx.run("UPDATE nodes SET title = 'two' WHERE node = :node", {"node": NODE})
    assert ledgersql.rows(ledger.db_path, "SELECT status, title FROM nodes") == [
        ("idle", "one")]
    ledger.add_event(NODE, "x", actor="operator", status="completed")  # the pool still works
    assert ledgersql.rows(ledger.db_path, "SELECT event FROM events") == [("x",)]
