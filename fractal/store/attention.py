"""Reads behind the attention inbox: one read-only connection, a handful of indexed
queries for the whole tree (stdlib ``sqlite3`` only; sized for 1,000 nodes and
1,000,000 step rows).

``attention_rows`` returns the registry, each node's newest run, the open steps with a
pending gate, the own spend and newest failed step of the newest runs that ended
``exited``, each paused node's
newest ``pause`` event, the newest write instant of each active node, each node's newest
merge when it failed, each node's newest ``usage_wait`` and ``outage_wait`` events and
the closed usage windows, the messages nodes sent to the operator (the root's ``inbox``) that the
operator has not read (the newest ``NOTES_MAX``), and the inbox's acknowledgements.
Every query reads through an index: the (event, node) and (run_id, cost) ones are
migration 0014's. A node created under a deleted node's name sees none of its
namesake's runs or merges (rows are keyed by name: ``rows.THIS_NODES_RUN``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from fractal.domain.run.reasons import AWAITING_APPROVAL
from fractal.domain.steps.waits import WAIT_STEP
from fractal.domain.usage.outage import OUTAGE_EVENT
from fractal.store.reader import _connect
from fractal.store.rows import THIS_NODES_RUN, NodeRow, RunRow, StepRow, born_since, columns
from fractal.store.spend import KNOWN_COST_SUM

_SQL_NAME = {"meta": "metadata"}


def _columns(cls: type[NodeRow | RunRow | StepRow]) -> str:
    """The SELECT list of ``cls``'s fields, in order (``meta`` is the ``metadata`` column)."""
    return ", ".join(columns(cls))

__all__ = ["NOTES_MAX", "AttentionRows", "FailedMerge", "Landed", "NoteRow", "WaitRow",
           "attention_rows"]

NOTES_MAX = 200
"""At most this many unread messages to the operator are read (the newest)."""

# Each timestamp column a node writes, read from its (node, column) index (migration 0005).
_WRITES = (("runs", "started_at"), ("runs", "ended_at"), ("iterations", "started_at"),
           ("iterations", "ended_at"), ("steps", "started_at"), ("steps", "ended_at"),
           ("events", "created_at"))


@dataclass(frozen=True)
class FailedMerge:
    """A node's newest ``merges`` row, when its status is ``failed``."""

    merge_id: int
    target: str
    reason: str
    created_at: str


@dataclass(frozen=True)
class Landed:
    """A node's newest ``merges`` row, when it landed: when it was booked, the target, and
    the commit it landed as (the squash commit; the child's tip for a merge that found
    nothing new)."""

    created_at: str
    target: str
    sha: str


@dataclass(frozen=True)
class WaitRow:
    """A node's newest ``usage_wait`` or ``outage_wait`` event (``started`` while it
    waits)."""

    event_id: int
    run_id: int | None
    status: str | None
    shown: str
    created_at: str


@dataclass(frozen=True)
class NoteRow:
    """An unread message to the operator: who sent it, its id, subject, priority, when."""

    sender: str
    uuid: str
    subject: str
    priority: int
    created_at: str


@dataclass(frozen=True)
class AttentionRows:
    """Everything ``attention_rows`` read; timestamps are the stored ISO text."""

    nodes: list[NodeRow]
    last_runs: dict[str, RunRow]
    gates: dict[str, list[StepRow]]
    spent: dict[int, float | None]
    pauses: dict[str, tuple[str, str]]  # node -> (created_at, reason)
    last_writes: dict[str, str]
    acks: dict[str, str]  # item key -> fingerprint
    merges: dict[str, FailedMerge]
    waits: dict[str, WaitRow]
    wakes: list[tuple[float, str]]  # (wake_at epoch s, window name) of closed windows
    notes: dict[str, list[NoteRow]]  # sender -> oldest first
    holding: frozenset[str] = frozenset()  # nodes with an open WAIT step (waiting on children)
    pause_asks: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    """paused node -> (run_id, reason) of the newest pause someone asked for (not the
    loop's own ``parked ...`` record) since the node's newest resume"""
    landed: dict[str, Landed] = field(default_factory=dict)  # child -> its newest merge, landed
    causes: dict[int, tuple[str, str]] = field(default_factory=dict)
    """exited run -> (step_name, reason) of its newest failed step"""
    waited: dict[int, str] = field(default_factory=dict)
    """gate step -> when its approval wait first began (its ``gate`` event ``started``)"""
    outages: dict[str, WaitRow] = field(default_factory=dict)
    """active node -> its newest ``outage_wait`` event, while ``started``"""
    waiting_since: dict[str, str] = field(default_factory=dict)
    """node holding an open WAIT step -> when that step began"""
    operator_pauses: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    """paused node -> (run_id, created_at) of the newest pause asked for since its newest
    resume, when the operator asked for it"""
    unmerged: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    """node -> (run_id, labels) of its newest ``unmerged`` event: the subtree work a
    ``completed`` run's end found never merged into it (``runtime/ends.record_unmerged``)"""


def _acks(conn: sqlite3.Connection) -> dict[str, str]:
    try:
        rows = conn.execute("SELECT item_key, fingerprint FROM inbox_acks").fetchall()
    except sqlite3.OperationalError:  # a database from before migration 0009
        return {}
    return {str(r[0]): str(r[1]) for r in rows}


def _optional(conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()
              ) -> list[tuple[object, ...]]:
    """The rows of ``sql``; none on a database from before the table it reads."""
    try:
        return list(conn.execute(sql, params))
    except sqlite3.OperationalError:
        return []


def _newest_events(conn: sqlite3.Connection, event: str) -> list[tuple[object, ...]]:
    """Each node's newest ``event`` row: (event_id, node, run_id, status, metadata,
    created_at), through the (event, node) index."""
    return list(conn.execute(
        "SELECT e.event_id, e.node, e.run_id, e.status, e.metadata, e.created_at FROM "
        "(SELECT MAX(event_id) AS newest FROM events WHERE event = ? GROUP BY node) AS m "
        "JOIN events AS e ON e.event_id = m.newest", (event,)))


def _merges(conn: sqlite3.Connection) -> tuple[dict[str, FailedMerge], dict[str, Landed]]:
    """Each child's newest merge: the failed ones, and the landed ones."""
    rows = _optional(conn, "SELECT merge_id, child, target, status, metadata, created_at, "
                     "COALESCE(squash_sha, child_sha) FROM merges WHERE merge_id IN "
                     "(SELECT MAX(merge_id) FROM merges GROUP BY child)")
    failed = {str(child): FailedMerge(int(str(mid)), str(target), str(meta), str(at))
              for mid, child, target, status, meta, at, _sha in rows if status == "failed"}
    landed = {str(child): Landed(str(at), str(target), str(sha or ""))
              for _mid, child, target, status, _m, at, sha in rows if status == "merged"}
    return failed, landed


def _notes(conn: sqlite3.Connection, root: str) -> dict[str, list[NoteRow]]:
    rows = _optional(
        conn, "SELECT m.sender, m.message_uuid, m.subject, m.priority, m.created_at "
        "FROM messages m INDEXED BY ix_messages_node_channel WHERE m.node = ? "
        "AND m.channel = 'inbox' AND m.unsent_at IS NULL AND m.sender IS NOT NULL "
        "AND m.sender != ? AND NOT EXISTS (SELECT 1 FROM reads r WHERE "
        "r.message_id = m.message_id AND r.node = ?) ORDER BY m.message_id DESC LIMIT ?",
        (root, root, root, NOTES_MAX))
    notes: dict[str, list[NoteRow]] = {}
    for sender, uuid, subject, priority, at in reversed(rows):
        notes.setdefault(str(sender), []).append(
            NoteRow(str(sender), str(uuid), str(subject), int(str(priority)), str(at)))
    return notes


def attention_rows(db_path: Path, root: str | None = None, *, create: bool = True,
                   only: Collection[str] | None = None) -> AttentionRows:
    """Read the facts of every node in one read-only connection (``root``: the tree's
    root branch, whose inbox is the operator's; None reads no messages). ``only``
    restricts the per-node rows to those branches (the dashboard re-reads the nodes
    whose rows changed); the acknowledgements and the closed windows are always read
    whole. ``create`` False never creates or upgrades the database (raises StoreError
    instead). Raises StoreError."""
    with _connect(db_path, create=create) as conn:
        conn.row_factory = None  # plain tuples, built positionally: 1,000s of rows
        names = sorted(only) if only is not None else None
        in_names = f"node IN ({', '.join('?' * len(names))})" if names else ""
        if names is not None and not names:
            nodes: list[NodeRow] = []
            runs: dict[str, RunRow] = {}
        else:
            where = f"WHERE {in_names}" if names else ""
            nodes = [NodeRow(*r) for r in conn.execute(
                f"SELECT {_columns(NodeRow)} FROM nodes {where} ORDER BY node_id",
                names or ())]
            own = f"{where} AND {THIS_NODES_RUN}" if names else f"WHERE {THIS_NODES_RUN}"
            runs = {r.node: r for r in (RunRow(*row) for row in conn.execute(
                f"SELECT {_columns(RunRow)} FROM runs WHERE run_id IN "
                f"(SELECT MAX(run_id) FROM runs {own} GROUP BY node)", names or ()))}
        known = {n.node for n in nodes}
        gates: dict[str, list[StepRow]] = {}
        holding: set[str] = set()
        waiting_since: dict[str, str] = {}
        for row in conn.execute(f"SELECT {_columns(StepRow)} FROM steps INDEXED BY "
                                "ix_steps_ended_at WHERE ended_at IS NULL ORDER BY step_id"):
            step = StepRow(*row)
            if step.approved == "" and step.node in known and \
                    AWAITING_APPROVAL in step.meta:
                gates.setdefault(step.node, []).append(step)
            elif step.step_name == WAIT_STEP and step.node in known:
                holding.add(step.node)
                waiting_since.setdefault(step.node, step.started_at)
        waited: dict[int, str] = {}  # gate step -> when its approval wait first began
        gate_ids = [s.step_id for rows_ in gates.values() for s in rows_]
        for start in range(0, len(gate_ids), 500):
            chunk = gate_ids[start:start + 500]
            for step_id, at in _optional(
                    conn, "SELECT step_id, MIN(created_at) FROM events WHERE event = "
                    "'gate' AND status = 'started' AND step_id IN "
                    f"({', '.join('?' * len(chunk))}) GROUP BY step_id", tuple(chunk)):
                waited[int(str(step_id))] = str(at)
        exited = [r.run_id for r in runs.values() if r.status == "exited"]
        spent: dict[int, float | None] = {}
        causes: dict[int, tuple[str, str]] = {}
        for start in range(0, len(exited), 500):
            chunk = exited[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            for run_id, total in conn.execute(
                    f"SELECT run_id, {KNOWN_COST_SUM} FROM steps WHERE run_id IN "
                    f"({marks}) GROUP BY run_id", chunk):
                spent[int(run_id)] = None if total is None else float(total)
            for run_id, name, meta, _newest in conn.execute(  # no bare columns: PostgreSQL
                    "SELECT run_id, step_name, metadata, step_id FROM steps WHERE step_id IN "
                    f"(SELECT MAX(step_id) FROM steps WHERE run_id IN ({marks}) AND status = "
                    "'failed' GROUP BY run_id)", chunk):
                causes[int(run_id)] = (str(name or ""), str(meta or ""))
        paused = [n.node for n in nodes if n.status == "paused"]
        pauses: dict[str, tuple[str, str]] = {}
        asks: dict[str, tuple[int | None, str]] = {}
        asked_by: dict[str, tuple[int | None, str]] = {}
        if paused:
            wanted = set(paused)
            for _eid, node, _run, _status, meta, at in _newest_events(conn, "pause"):
                if node in wanted:
                    pauses[str(node)] = (str(at), str(meta))
            marks = ", ".join("?" * len(paused))
            # An ask older than the node's newest resume was answered by that resume: the
            # park shown now is a newer one (an interruption, say), not the ask's.
            for node, run, meta, actor, at, _newest in conn.execute(
                    "SELECT node, run_id, metadata, actor, created_at, event_id FROM events "
                    "WHERE event_id IN (SELECT MAX(event_id) FROM events AS a WHERE event = "
                    f"'pause' AND status = 'completed' AND actor != 'loop' AND node IN ({marks}) "
                    "AND event_id > COALESCE((SELECT MAX(r.event_id) FROM events AS r WHERE "
                    "r.event = 'resume' AND r.status = 'completed' AND r.node = a.node), 0) "
                    "GROUP BY node)", paused):
                if meta:
                    asks[str(node)] = (None if run is None else int(str(run)), str(meta))
                if actor == "operator":
                    asked_by[str(node)] = (None if run is None else int(str(run)), str(at))
        writes: dict[str, str] = {}
        for node in (n.node for n in nodes if n.status == "active"):
            arms = " UNION ALL ".join(f"SELECT MAX({column}) FROM {table} WHERE node = ?"
                                      for table, column in _WRITES)
            stamps = [r[0] for r in conn.execute(arms, [node] * len(_WRITES)) if r[0]]
            if stamps:
                writes[node] = max(stamps)
        waits: dict[str, WaitRow] = {}
        outages: dict[str, WaitRow] = {}
        wakes: list[tuple[float, str]] = []
        if any(n.status == "active" for n in nodes):
            for eid, node, run, status, meta, at in _newest_events(conn, "usage_wait"):
                if status == "started":
                    waits[str(node)] = WaitRow(int(str(eid)), None if run is None
                                               else int(str(run)), str(status), str(meta),
                                               str(at))
            for eid, node, run, status, meta, at in _newest_events(conn, OUTAGE_EVENT):
                if status == "started":
                    outages[str(node)] = WaitRow(int(str(eid)), None if run is None
                                                 else int(str(run)), str(status), str(meta),
                                                 str(at))
            if waits:
                wakes = [(float(str(w)), str(name)) for w, name in _optional(
                    conn, 'SELECT wake_at, "window" FROM usage_windows WHERE state != \'open\'')]
        notes = _notes(conn, root) if root is not None else {}
        merges, landed = _merges(conn)
        born = {n.node: n.created_at for n in nodes}  # a deleted namesake's merges stay out
        merges = {k: v for k, v in merges.items() if born_since(born.get(k), v.created_at)}
        landed = {k: v for k, v in landed.items() if born_since(born.get(k), v.created_at)}
        if only is not None:
            notes = {k: v for k, v in notes.items() if k in only}
            merges = {k: v for k, v in merges.items() if k in only}
            landed = {k: v for k, v in landed.items() if k in only}
        waits = {k: v for k, v in waits.items() if k in known}
        unmerged = {str(node): (None if run is None else int(str(run)), str(meta or ""))
                    for _eid, node, run, _status, meta, _at in _newest_events(conn, "unmerged")
                    if node in known}
        return AttentionRows(nodes, runs, gates, spent, pauses, writes, _acks(conn),
                             merges, waits, wakes, notes, frozenset(holding), asks,
                             landed, causes, waited,
                             {k: v for k, v in outages.items() if k in known},
                             waiting_since, asked_by, unmerged)
