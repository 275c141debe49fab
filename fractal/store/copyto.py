"""Copy a SQLite ledger's rows into an empty PostgreSQL database (``fractal db copy-to``).

The target is first brought to the head revision (``pgschema.ensure_schema``); then one
PostgreSQL transaction, holding the tree's advisory lock, refuses a target that holds
any row, inserts every table's rows with their ids as they are (parents before children,
the models' foreign-key order), moves each id sequence past the largest copied id, and
compares each table's row count with the SQLite file's. Any failure rolls the whole copy
back: the target is left empty. The SQLite file is only read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from fractal.errors import StoreError
from fractal.store import pgdriver, pgschema
from fractal.store.backend import without_password

__all__ = ["BATCH_ROWS", "TableCopy", "copy_ledger"]

BATCH_ROWS = 200
"""Rows per INSERT statement (a multi-row VALUES list)."""

TableCopy = tuple[str, int]
"""One copied table: its name and its row count (the same on both sides)."""


def copy_ledger(sqlite_path: Path, url: str) -> list[TableCopy]:
    """Copy every row of the SQLite ledger at ``sqlite_path`` into the PostgreSQL database
    at ``url`` (migrated to head first); return each table with its row count, in copy
    order. Raises StoreError when the server cannot be reached or migrated, when the
    target already holds rows (nothing is written), or when a table's count differs after
    the copy (the copy is rolled back)."""
    pgschema.ensure_schema(url)
    tables = _copy_order()
    source = sqlite3.connect(sqlite_path.resolve().as_uri() + "?mode=ro", uri=True,
                             isolation_level=None)
    source.execute("BEGIN")  # one snapshot of the file for every table
    try:
        conn = pgdriver.connect(url)
    except pgdriver.PgError as exc:
        source.close()
        raise pgschema.unreachable(url, exc) from exc
    try:
        conn.execute("BEGIN")
        conn.execute(f"SELECT pg_advisory_xact_lock({pgdriver.TREE_LOCK_KEY})")
        _refuse_rows(conn, tables, url)
        copied = [(table, _copy_table(source, conn, table)) for table in tables]
        _advance_sequences(conn, tables)
        _check_counts(conn, copied)
        conn.execute("COMMIT")
    except pgdriver.PgError as exc:
        raise StoreError(f"cannot copy the ledger into {without_password(url)}: "
                         f"{_first_line(exc)}; nothing was kept there") from exc
    finally:
        if not conn.closed and conn.transaction_status != 0:
            conn.execute("ROLLBACK")
        conn.close()
        source.close()
    return copied


def _copy_order() -> list[str]:
    """The ledger's tables, each after the tables its foreign keys name."""
    from fractal.store.models import Base  # deferred: start-up cost (SQLAlchemy, 220 modules)

    return [table.name for table in Base.metadata.sorted_tables]


def _refuse_rows(conn: pgdriver.Connection, tables: Sequence[str], url: str) -> None:
    full = [t for t in tables
            if conn.execute(f'SELECT EXISTS (SELECT 1 FROM "{t}")').fetchone()[0]]
    if full:
        raise StoreError(f"the database {without_password(url)} already holds rows (in "
                         f"{', '.join(full)}); copy into an empty database: create a new "
                         "one (createdb) or drop this one's tables, then run `fractal db "
                         "copy-to` again")


def _columns(source: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in source.execute(f'PRAGMA table_info("{table}")')]


def _copy_table(source: sqlite3.Connection, conn: pgdriver.Connection, table: str) -> int:
    """Insert every row of ``table`` as SQLite holds it; return how many."""
    names = _columns(source, table)
    if not names:  # a table the file predates holds nothing to copy
        return 0
    quoted = ", ".join(f'"{name}"' for name in names)
    cursor = source.execute(f'SELECT {quoted} FROM "{table}"')
    count = 0
    while batch := cursor.fetchmany(BATCH_ROWS):
        width = len(names)
        values = ", ".join(
            "(" + ", ".join(f"${i * width + j + 1}" for j in range(width)) + ")"
            for i in range(len(batch)))
        params = [value for row in batch for value in row]
        conn.execute(f'INSERT INTO "{table}" ({quoted}) VALUES {values}', params)
        count += len(batch)
    return count


def _advance_sequences(conn: pgdriver.Connection, tables: Sequence[str]) -> None:
    """Set each table's id sequence so the next id is one past the largest copied one."""
    rows = conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() "
        "AND (column_default LIKE 'nextval(%' OR is_identity = 'YES')").fetchall()
    for table, column in rows:
        if table not in tables:
            continue
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence('\"{table}\"', '{column}'), "
            f'COALESCE((SELECT MAX("{column}") FROM "{table}"), 0) + 1, false)')


def _check_counts(conn: pgdriver.Connection, copied: Sequence[TableCopy]) -> None:
    for table, count in copied:
        held = int(conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0])
        if held != count:
            raise pgdriver.PgError(f"table {table} holds {held} rows after the copy, "
                                   f"the SQLite file {count}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
