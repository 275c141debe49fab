# Over 400 lines: one concept, every read-only query the commands run and the rules they share.
"""The fast read path: stdlib ``sqlite3`` only, read-only connections, frozen rows (a
PostgreSQL ledger is read through ``pgdriver.ReadConnection``, the same calls).

CLI read commands (``status``, ``activity``, listings) must start in well under 200 ms,
and importing SQLAlchemy alone costs about 250 ms, so this module never imports it:
reads are plain queries. Each call opens one read-only connection
(``mode=ro``) with a short busy timeout; WAL lets it read while a loop writes, and a
query that meets a lock all the same is asked again up to the wait's bound
(``store.lockwait``). When the file is not at ``HEAD_REVISION`` the schema is first
brought to head (``ensure_schema``, which imports Alembic only then); a missing tree
database is refused (``schema.refuse_missing``), never created here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from fractal.domain.run.reasons import AWAITING_APPROVAL
from fractal.errors import StoreError
from fractal.store import pgdriver
from fractal.store.backend import database_url, without_password
from fractal.store.lockwait import is_lock_error, patiently
from fractal.store.rows import THIS_NODES_RUN, ActivityRow, NodeRow, RunRow, StepRow, build
from fractal.store.schema import HEAD_REVISION, ensure_schema

if TYPE_CHECKING:
    from fractal.domain.doctor import DbFacts

__all__ = ["READ_BUSY_TIMEOUT_S", "LastMerge", "TreeGone", "activity", "awaiting_approval",
           "inspect_database", "last_run", "newest_merges",
           "node_row", "node_rows",
           "open_steps", "pending_signals", "refused_merges"]

READ_BUSY_TIMEOUT_S = 2.0
"""How long a read waits on a lock (s); WAL readers rarely wait at all."""

# Newest first. Among rows of one instant, deeper lineage (a step under its iteration
# under its run) and higher ids sort first, and an end row before its own start row.
_ACTIVITY_ORDER = (
    "ORDER BY timestamp DESC, run_id DESC, iter_id DESC, step_id DESC, event_id DESC, "
    "CASE event WHEN 'end' THEN 0 ELSE 1 END"
)

# Every timestamp column an ``activity`` row takes its instant from, one row per value
# (migrations 0001 and 0004 define the view; 0005 indexes these columns).
_ACTIVITY_CLOCKS = (("runs", "started_at"), ("runs", "ended_at"), ("iterations", "started_at"),
                    ("iterations", "ended_at"), ("steps", "started_at"), ("steps", "ended_at"),
                    ("events", "created_at"), ("checks", "ended_at"))


class _Patient(sqlite3.Connection):
    """A read-only connection whose queries wait out another process's lock: each query
    is its own snapshot, so one refused for a lock is simply asked again
    (``lockwait.patiently``: up to the bound, then DatabaseLocked). A WAL reader meets a
    lock only when a writer holds the file exclusively (``locking_mode=EXCLUSIVE``)."""

    db_path = Path()

    def execute(self, sql: str, params: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, params)
        except sqlite3.Error as exc:
            if not is_lock_error(exc):
                raise
            return patiently(self.db_path, lambda span: self._again(span, sql, params), exc,
                             waited=READ_BUSY_TIMEOUT_S)

    def _again(self, span: float, sql: str, params: Any) -> sqlite3.Cursor:
        super().execute(f"PRAGMA busy_timeout={int(span * 1000)}")
        try:
            return super().execute(sql, params)
        finally:
            super().execute(f"PRAGMA busy_timeout={int(READ_BUSY_TIMEOUT_S * 1000)}")


def _open(db_path: Path, *, patient: bool = True) -> sqlite3.Connection:
    """A read-only connection; ``patient`` False keeps the short busy timeout alone."""
    conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True,
                           timeout=READ_BUSY_TIMEOUT_S,
                           factory=_Patient if patient else sqlite3.Connection)
    if isinstance(conn, _Patient):
        conn.db_path = db_path
    conn.row_factory = sqlite3.Row
    return conn


def _at_head(conn: sqlite3.Connection) -> bool:
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError as exc:
        if is_lock_error(exc):  # waited for in vain: not a reason to migrate
            raise
        return False
    return row is not None and row[0] == HEAD_REVISION


class TreeGone(StoreError):
    """The tree's database file is gone (``fractal destroy``, or removed by hand)."""


@contextmanager
def _connect(db_path: Path, *, create: bool = True) -> Iterator[sqlite3.Connection]:
    """A read-only connection to a database at head; SQLite errors become StoreError.

    ``create`` False (a dashboard watching a tree that may be destroyed under it) never
    creates nor upgrades the file, nor waits past the short busy timeout for a lock (the
    dashboard keeps its last reading instead): a missing one raises TreeGone, one below head a
    StoreError saying how to upgrade it. A PostgreSQL ledger (``backend.database_url``) is
    read through ``pgdriver.ReadConnection``, brought to head on first use.
    """
    url = database_url(db_path)
    if url is not None:
        with _connect_pg(url) as pg:
            yield pg
        return
    try:
        conn: sqlite3.Connection | None = None
        if db_path.is_file():
            conn = _open(db_path, patient=create)
            if not _at_head(conn):
                conn.close()
                conn = None
        if conn is None and not create:
            if not db_path.is_file():
                raise TreeGone(f"the tree's database {db_path} is gone (destroyed?); "
                               "nothing is left to show")
            raise StoreError(f"the database {db_path} is at an older schema; any fractal "
                             "command (`fractal node list`) upgrades it")
        if conn is None:

            ensure_schema(db_path)
            conn = _open(db_path)
        try:
            yield conn
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(
            f"cannot read database {db_path}: {exc}; check the path and its permissions"
        ) from exc


@contextmanager
def _connect_pg(url: str) -> Iterator[sqlite3.Connection]:
    """A read connection to the PostgreSQL ledger at ``url`` (at head: migrated on first
    use); its errors become StoreError as a SQLite file's do."""
    # The schema module imports SQLAlchemy only to migrate; a SQLite tree never loads it.
    from fractal.store import pgschema  # deferred: start-up cost (1 module)

    pgschema.ensure_once(url)
    try:
        conn = pgdriver.ReadConnection(url)
    except Exception as exc:
        raise pgschema.unreachable(url, exc) from exc
    try:
        yield conn  # type: ignore[misc]  # the sqlite3.Connection calls the readers make
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the ledger: {exc}") from exc
    finally:
        conn.close()


def activity(db_path: Path, nodes: Sequence[str] | None, limit: int | None) -> list[ActivityRow]:
    """Rows of the ``activity`` view, newest first.

    ``nodes`` restricts to those branches (None: every node; empty: no rows), each to the
    rows since its registration (a deleted namesake's history stays out, so a subtree's
    listing may hold fewer than ``limit`` rows);
    ``limit`` caps the row count (None: all). Ties on the timestamp break on the row
    ids, so the order is stable.
    """
    where = ""
    params: list[object] = []
    if nodes is not None:
        if not nodes:
            return []
        where = f"WHERE node IN ({', '.join('?' * len(nodes))})"
        params.extend(nodes)
    with _connect(db_path) as conn:
        born: dict[str, str] = {}
        if nodes is not None:  # rows since each node's registration: a constant floor
            born = {str(n): str(at) for n, at in conn.execute(  # the indexes can use
                f"SELECT node, created_at FROM nodes WHERE node IN "
                f"({', '.join('?' * len(nodes))})", list(nodes))}
            if len(born) == len(set(nodes)):
                where += " AND timestamp >= ?"
                params.append(min(born.values()))
        tail = ""
        if limit is not None:
            cutoff = _activity_cutoff(conn, nodes, limit)
            if cutoff is not None:
                where = f"{where} AND timestamp >= ?" if where else "WHERE timestamp >= ?"
                params.append(cutoff)
            tail = "LIMIT ?"
            params.append(max(limit, 0))
        sql = f"SELECT * FROM activity {where} {_ACTIVITY_ORDER} {tail}"
        rows = [build(ActivityRow, row) for row in conn.execute(sql, params)]
    return [r for r in rows if r.node not in born or r.timestamp >= born[r.node]]


def _activity_cutoff(conn: sqlite3.Connection, nodes: Sequence[str] | None,
                     limit: int) -> str | None:
    """The instant of the ``limit``-th newest activity row, or None when there are fewer.

    Reads only the newest ``limit`` entries of each timestamp index (migration 0005),
    so the view can then be asked for ``timestamp >= cutoff``, which SQLite pushes into
    every arm as an index range instead of sorting the whole history. Each clock in
    ``_ACTIVITY_CLOCKS`` yields exactly one view row per value, so the answer is exact;
    a clock missing from the list could only lower the cutoff (more rows read), never
    drop a row.
    """
    if limit <= 0:
        return None
    node_filter = ""
    params: list[object] = []
    if nodes is not None:
        node_filter = f"AND node IN ({', '.join('?' * len(nodes))})"
    arms = []
    for number, (table, column) in enumerate(_ACTIVITY_CLOCKS):  # aliased: PostgreSQL's rule
        arms.append(f"SELECT * FROM (SELECT {column} AS t FROM {table} WHERE {column} "
                    f"IS NOT NULL {node_filter} ORDER BY {column} DESC LIMIT ?) AS arm{number}")
        params.extend([*(nodes or ()), limit])
    sql = (f"SELECT t FROM ({' UNION ALL '.join(arms)}) AS clocks ORDER BY t DESC LIMIT 1 "
           "OFFSET ?")
    row = conn.execute(sql, [*params, limit - 1]).fetchone()
    return None if row is None else str(row[0])


def node_rows(db_path: Path) -> list[NodeRow]:
    """Every registered node, in registration order."""
    with _connect(db_path) as conn:
        rows = conn.execute("SELECT * FROM nodes ORDER BY node_id").fetchall()
    return [build(NodeRow, row) for row in rows]


def node_row(db_path: Path, node: str) -> NodeRow | None:
    """The registry row of ``node``, or None."""
    with _connect(db_path) as conn:
        row = conn.execute("SELECT * FROM nodes WHERE node = ?", (node,)).fetchone()
    return None if row is None else build(NodeRow, row)


def failed_step(db_path: Path, run_id: int) -> tuple[str, str] | None:
    """(step_name, reason) of run ``run_id``'s newest failed step, or None."""
    with _connect(db_path) as conn:
        row = conn.execute("SELECT step_name, metadata FROM steps WHERE run_id = ? AND "
                           "status = 'failed' ORDER BY step_id DESC LIMIT 1",
                           (run_id,)).fetchone()
    return None if row is None else (str(row[0] or ""), str(row[1] or ""))


def last_run(db_path: Path, node: str) -> RunRow | None:
    """The node's newest run, open or closed, or None (a deleted namesake's runs are not
    the node's: ``rows.THIS_NODES_RUN``)."""
    with _connect(db_path) as conn:
        row = conn.execute(
            f"SELECT * FROM runs WHERE node = ? AND {THIS_NODES_RUN} ORDER BY run_id DESC "
            "LIMIT 1", (node,)).fetchone()
    return None if row is None else build(RunRow, row)


def open_steps(db_path: Path, node: str) -> list[StepRow]:
    """The node's step rows with ``ended_at`` NULL, in booking order."""
    with _connect(db_path) as conn:
        rows = conn.execute(
            "SELECT * FROM steps WHERE node = ? AND ended_at IS NULL ORDER BY step_id", (node,)
        ).fetchall()
    return [build(StepRow, row) for row in rows]


def pending_signals(db_path: Path, node: str) -> set[str]:
    """Names of the signals pending on the node's open run (empty when none is open)."""
    with _connect(db_path) as conn:
        rows = conn.execute(
            "SELECT DISTINCT s.signal FROM signals s JOIN runs r ON r.run_id = s.run_id "
            "WHERE r.node = ? AND r.ended_at IS NULL", (node,)).fetchall()
    return {str(row[0]) for row in rows}


def awaiting_approval(db_path: Path, node: str) -> list[StepRow]:
    """The node's open steps whose approval gate is pending (the agent's turn is over:
    reason ``awaiting approval``), oldest first."""
    with _connect(db_path) as conn:
        rows = conn.execute(
            "SELECT * FROM steps WHERE node = ? AND approved = '' AND ended_at IS NULL "
            "AND metadata LIKE ? ORDER BY step_id", (node, f"%{AWAITING_APPROVAL}%")).fetchall()
    return [build(StepRow, row) for row in rows]


def refused_merges(db_path: Path, target: str) -> list[tuple[str, str]]:
    """``(child, reason)`` of each registered, unretired node whose newest merge into
    ``target`` is a refusal (a ``failed`` ``merges`` row whose reason starts ``refused:``,
    as a node's refused merge of its child into itself books it), by child, booked since
    the child was registered (not a deleted namesake's); none on a database from before
    the ``merges`` table."""
    with _connect(db_path) as conn:
        try:
            rows = conn.execute(
                "SELECT m.child, m.metadata FROM merges m JOIN nodes n ON n.node = m.child "
                "WHERE m.merge_id IN (SELECT MAX(merge_id) FROM merges WHERE target = ? "
                "GROUP BY child) AND m.status = 'failed' AND m.metadata LIKE 'refused:%' "
                "AND n.status != 'retired' AND m.created_at >= n.created_at ORDER BY m.child",
                (target,)).fetchall()
        except sqlite3.OperationalError:
            return []
    return [(str(row[0]), str(row[1])) for row in rows]


class LastMerge(NamedTuple):
    """A node's newest ``merges`` row: its status (``active``, ``merged``, ``failed``),
    target, reason, the commit it landed as (the squash commit, else the child's tip)
    and when it was booked (stored ISO text)."""

    status: str
    target: str
    reason: str
    sha: str
    created_at: str


def newest_merges(db_path: Path, children: Sequence[str]) -> dict[str, LastMerge]:
    """Each of ``children``'s newest ``merges`` row booked since the child was registered
    (a deleted namesake's stay out), by child; none on a database from before the
    ``merges`` table."""
    if not children:
        return {}
    marks = ", ".join("?" * len(children))
    with _connect(db_path) as conn:
        try:
            rows = conn.execute(
                "SELECT m.child, m.status, m.target, m.metadata, COALESCE(m.squash_sha, "
                "m.child_sha), m.created_at FROM merges m JOIN nodes n ON n.node = m.child "
                "WHERE m.merge_id IN (SELECT MAX(merge_id) FROM merges "
                f"WHERE child IN ({marks}) GROUP BY child) AND m.created_at >= n.created_at",
                tuple(children)).fetchall()
        except sqlite3.OperationalError:
            return {}
    return {str(r[0]): LastMerge(str(r[1]), str(r[2]), str(r[3] or ""), str(r[4] or ""),
                                 str(r[5])) for r in rows}


def inspect_database(db_path: Path) -> tuple[DbFacts, list[NodeRow] | None]:
    """What ``fractal doctor`` needs of the tree database, read only (never created,
    migrated nor healed): its facts (presence, ``PRAGMA integrity_check``, the schema
    stamp) and the registered nodes (None when the file or its ``nodes`` table cannot
    be read). A lock is waited for as by every read."""
    # deferred: start-up cost (only `fractal doctor` needs it)
    from fractal.domain.doctor import DbFacts

    shown = str(db_path)
    url = database_url(db_path)
    if url is not None:
        return _inspect_pg(url)
    if not db_path.is_file():
        return DbFacts(shown, exists=False), None
    try:
        conn = _open(db_path)
    except sqlite3.Error as exc:
        return DbFacts(shown, exists=True, error=str(exc)), None
    try:
        try:
            integrity = tuple(str(r[0]) for r in conn.execute("PRAGMA integrity_check"))
        except sqlite3.Error as exc:
            return DbFacts(shown, exists=True, error=str(exc)), None
        return _stamp_and_nodes(conn, DbFacts(shown, exists=True, integrity=integrity))
    finally:
        conn.close()


def _inspect_pg(url: str) -> tuple[DbFacts, list[NodeRow] | None]:
    """``inspect_database`` for a PostgreSQL ledger: present when the server answers (its
    integrity is the server's: ``ok`` once it answers), its stamp, its nodes."""
    # deferred: only `fractal doctor` needs it: start-up cost (1 module)
    from fractal.domain.doctor import DbFacts

    shown = without_password(url)
    try:
        conn = pgdriver.ReadConnection(url)
    except Exception as exc:  # the server did not answer
        return DbFacts(shown, exists=True, error=str(exc).strip().splitlines()[0]), None
    try:
        return _stamp_and_nodes(conn, DbFacts(shown, exists=True, integrity=("ok",)))
    finally:
        conn.close()


def _stamp_and_nodes(conn: Any, facts: DbFacts) -> tuple[DbFacts, list[NodeRow] | None]:
    """``facts`` with the ledger's schema stamp (None: unreadable), and its node rows
    (None: unreadable), read on ``conn`` (either driver's read connection)."""
    try:
        stamp = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        stamp = None
    facts = facts._replace(revision=None if stamp is None else str(stamp[0]))
    try:
        rows = [build(NodeRow, row) for row in
                conn.execute("SELECT * FROM nodes ORDER BY node_id").fetchall()]
    except (sqlite3.Error, TypeError, ValueError, KeyError):
        return facts, None
    return facts, rows
