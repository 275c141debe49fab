# Over 400 lines: the whole schema in one place, the one ``metadata`` Alembic's
# autogenerate and the drift check read; each class is one table's contract, and a split
# would scatter the schema across modules.
"""Typed SQLAlchemy 2.0 models of the central database (one SQLite file per tree).

The tables: the node registry and the execution ledger (runs > iterations > steps),
events, signals, messages (a node's channels; 0003) with the radio's read receipts and
saved messages (``reads``, ``saves``; 0008), checks (exit checks and gate steps; 0004; their score, 0012),
rescues (the rescue refs written before a destructive verb; 0006), merges (0007), usage
windows (one shared window per credential; 0010) and worker pools with their items
(0011). The ``activity`` view is not a model: migration 0001 creates it with raw SQL,
0004 recreates it with check rows.

- timestamps are TEXT in the ``timefmt`` format, except the usage windows' instants,
  which are epoch seconds (REAL) because the loop computes with them; durations are
  never stored;
- statuses are plain strings of the status vocabulary (``fractal.domain.states``);
- ``cost`` is REAL USD and NULL means unknown (never coerced to 0);
- history rows carry the owning ``node`` as text, with no foreign key to ``nodes``,
  so deleting a node keeps its history.

The SQL column ``metadata`` (a short reason) is the attribute ``meta``: SQLAlchemy
reserves ``metadata`` on declarative classes. Migrations must match these models;
``alembic check`` guards drift.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import (
    REAL,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "NAMING_CONVENTION",
    "Base",
    "Check",
    "Event",
    "InboxAck",
    "Iteration",
    "Merge",
    "Message",
    "MessageRead",
    "MessageSave",
    "Node",
    "Notification",
    "Pool",
    "PoolItem",
    "Rescue",
    "Run",
    "Signal",
    "Step",
    "UsageWindow",
]

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative root: a naming convention for constraints; TEXT, REAL, INTEGER types
    (REAL is SQLite's 8-byte float; on PostgreSQL, where REAL has 4 bytes and would round
    an epoch second to minutes, DOUBLE PRECISION)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        str: Text(), float: REAL().with_variant(Double(), "postgresql"), int: Integer()}


def _by_node(table: str, *columns: str) -> tuple[Index, ...]:
    """``ix_<table>_node_<column>`` on (node, column) for each timestamp column: one
    node's newest activity rows without scanning the tree's (migration 0005)."""
    return tuple(Index(f"ix_{table}_node_{column}", "node", column) for column in columns)


def _meta() -> Mapped[str]:
    """The ``metadata`` reason column: TEXT NOT NULL, empty by default."""
    return mapped_column(
        "metadata", Text(), nullable=False, default="", server_default=text("''")
    )


class Node(Base):
    """The registry row of one node (branch). ``worktree`` is relative to the clone
    (``.worktrees/<node>``; ``Tree.worktree_at`` joins it with a clone's root)."""

    __tablename__ = "nodes"

    node_id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str] = mapped_column(unique=True)
    parent: Mapped[str | None]
    title: Mapped[str | None]
    status: Mapped[str]
    worktree: Mapped[str | None]
    max_cost: Mapped[float | None]
    max_depth: Mapped[int | None]
    max_children: Mapped[int | None]
    max_descendants: Mapped[int | None]
    tmux_session: Mapped[str | None]
    tmux_socket: Mapped[str | None]
    supervisor_pid: Mapped[int | None]
    supervisor_started: Mapped[float | None]  # process create time, epoch seconds
    created_at: Mapped[str]
    updated_at: Mapped[str | None]
    host: Mapped[str | None]  # the machine owning the worktree and processes (NULL: this one)


class Latch(Base):
    """The tree-wide brake of a PostgreSQL ledger (one row, ``latch_id`` 1, while it is
    on); a SQLite tree's brake is its ``.paused`` file."""

    __tablename__ = "latches"

    latch_id: Mapped[int] = mapped_column(primary_key=True)
    reason: Mapped[str]
    created_at: Mapped[str]


class Run(Base):
    """One launch of a node's loop: agent, the cost cap armed at launch, parent's run."""

    __tablename__ = "runs"
    __table_args__ = _by_node("runs", "started_at", "ended_at")

    run_id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str] = mapped_column(index=True)
    parent_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.run_id"), index=True)
    agent: Mapped[str | None]
    max_cost: Mapped[float | None]
    status: Mapped[str]
    exit_code: Mapped[int | None]
    meta: Mapped[str] = _meta()
    started_at: Mapped[str] = mapped_column(index=True)
    ended_at: Mapped[str | None] = mapped_column(index=True)


class Iteration(Base):
    """One pass through the step files; ``iter`` is 1-based within its run."""

    __tablename__ = "iterations"
    __table_args__ = _by_node("iterations", "started_at", "ended_at")

    iter_id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str]
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.run_id"), index=True)
    iter: Mapped[int]
    agent: Mapped[str | None]
    model: Mapped[str | None]
    session: Mapped[str | None]
    status: Mapped[str]
    exit_code: Mapped[int | None]
    meta: Mapped[str] = _meta()
    started_at: Mapped[str] = mapped_column(index=True)
    ended_at: Mapped[str | None] = mapped_column(index=True)


class Step(Base):
    """One launch attempt of a step; SYNC rows use the number of the step they precede.

    ``approved``: NULL no gate, '' pending, ISO timestamp approved. ``pgid_started``
    is the create time (epoch s) of the agent's group leader, for safe reaping.
    ``input_tokens`` (cached included), ``cached_input_tokens`` and ``output_tokens`` are
    this attempt's own usage, NULL when the agent reported none.
    """

    __tablename__ = "steps"
    # A run's own spend, with the known-cost rule's pgid and ended_at, read from the index
    # alone (migration 0015).
    __table_args__ = (*_by_node("steps", "started_at", "ended_at"),
                      Index("ix_steps_run_spend", "run_id", "cost", "pgid", "ended_at"))

    step_id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str]
    iter_id: Mapped[int | None] = mapped_column(ForeignKey("iterations.iter_id"), index=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.run_id"), index=True)
    step: Mapped[int]
    step_name: Mapped[str]
    agent: Mapped[str | None]
    model: Mapped[str | None]
    session: Mapped[str | None]
    status: Mapped[str]
    exit_code: Mapped[int | None]
    cost: Mapped[float | None]
    approved: Mapped[str | None]
    pgid: Mapped[int | None]
    pgid_started: Mapped[float | None]
    meta: Mapped[str] = _meta()
    started_at: Mapped[str] = mapped_column(index=True)
    ended_at: Mapped[str | None] = mapped_column(index=True)
    # Token usage of this attempt as the agent reported it (migration 0002); NULL: none.
    input_tokens: Mapped[int | None]
    cached_input_tokens: Mapped[int | None]
    output_tokens: Mapped[int | None]


class Event(Base):
    """An observability event (init, spawn, commit, pause, ...) with optional lineage."""

    __tablename__ = "events"
    # (event, node): each node's newest event of one kind, tree-wide (migration 0014).
    __table_args__ = (*_by_node("events", "created_at"),
                      Index("ix_events_event_node", "event", "node"))

    event_id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str] = mapped_column(index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.run_id"))
    iter_id: Mapped[int | None] = mapped_column(ForeignKey("iterations.iter_id"))
    step_id: Mapped[int | None] = mapped_column(ForeignKey("steps.step_id"))
    event: Mapped[str]
    actor: Mapped[str | None]
    status: Mapped[str | None]
    exit_code: Mapped[int | None]
    meta: Mapped[str] = _meta()
    created_at: Mapped[str] = mapped_column(index=True)


class Signal(Base):
    """A signal (pause, finish, stop, ...) addressed to one run, consumed by its loop."""

    __tablename__ = "signals"

    signal_id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str]
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.run_id"), index=True)
    signal: Mapped[str]
    meta: Mapped[str] = _meta()
    created_at: Mapped[str]


class Message(Base):
    """A message on a node's channel (``node`` hosts it; ``sender`` wrote it), e.g. the
    ``outbox`` notice ``run exited: <reason>``.

    ``message_uuid`` is 8 hex characters; ``priority`` 0-10 (10 most urgent);
    ``parent_message_uuid`` is the message it replies to (NULL: it starts a thread);
    ``unsent_at`` is set when its sender withdrew it (the row is kept).
    """

    __tablename__ = "messages"
    __table_args__ = (Index("ix_messages_node_channel", "node", "channel"),)

    message_id: Mapped[int] = mapped_column(primary_key=True)
    message_uuid: Mapped[str] = mapped_column(unique=True)
    node: Mapped[str]
    channel: Mapped[str]
    sender: Mapped[str | None]
    priority: Mapped[int]
    subject: Mapped[str]
    data: Mapped[str]
    meta: Mapped[str] = _meta()
    created_at: Mapped[str]
    parent_message_uuid: Mapped[str | None] = mapped_column(index=True)
    unsent_at: Mapped[str | None]


class MessageRead(Base):
    """A read receipt: ``node`` read message ``message_id`` at ``created_at`` (migration
    0008). One per (message, reader)."""

    __tablename__ = "reads"
    __table_args__ = (UniqueConstraint("message_id", "node"),)

    read_id: Mapped[int] = mapped_column(primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.message_id"))
    node: Mapped[str]
    created_at: Mapped[str]


class MessageSave(Base):
    """A saved message: ``node`` keeps ``message_id`` at hand (``radio messages --saved``;
    migration 0008). One per (message, node)."""

    __tablename__ = "saves"
    __table_args__ = (UniqueConstraint("message_id", "node"),)

    save_id: Mapped[int] = mapped_column(primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.message_id"))
    node: Mapped[str]
    created_at: Mapped[str]


class Check(Base):
    """One check command the loop ran itself: the node's exit check after an
    iteration (``kind`` 'exit'), or a gate step (``kind`` 'gate', ``step_id`` its row).

    ``signature`` is '' when the check passed; ``failures`` and ``passed`` are the counts
    parsed from its output, NULL when unknown; ``output_path`` is the full log; ``score``
    is the score in [0, 1] it reported, NULL when none.
    """

    __tablename__ = "checks"
    __table_args__ = _by_node("checks", "ended_at")

    check_id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str] = mapped_column(index=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.run_id"), index=True)
    iter_id: Mapped[int | None] = mapped_column(ForeignKey("iterations.iter_id"))
    step_id: Mapped[int | None] = mapped_column(ForeignKey("steps.step_id"))
    kind: Mapped[str]
    command: Mapped[str]
    exit_code: Mapped[int]
    signature: Mapped[str] = mapped_column(default="", server_default=text("''"))
    failures: Mapped[int | None]
    passed: Mapped[int | None]
    output_path: Mapped[str | None]
    started_at: Mapped[str]
    ended_at: Mapped[str] = mapped_column(index=True)
    score: Mapped[float | None]


class UsageWindow(Base):
    """The shared usage window of one credential (a subscription or API key fingerprint,
    never the key): ``state`` ``closed`` | ``probing`` | ``open``; instants are epoch
    seconds (REAL) because the loop computes with them; ``window`` names it
    (``five_hour``, ``seven_day``, ``unknown``); ``released`` counts the nodes let go
    since it reopened (they launch a few at a time)."""

    __tablename__ = "usage_windows"

    credential: Mapped[str] = mapped_column(primary_key=True)
    window: Mapped[str]
    state: Mapped[str]
    resets_at: Mapped[float | None]
    wake_at: Mapped[float]
    prober: Mapped[str | None]
    probe_started: Mapped[float | None]
    misses: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    opened_at: Mapped[float | None]
    released: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    closed_by: Mapped[str | None]
    updated_at: Mapped[str]


class ProviderOutage(Base):
    """A credential's provider outage while it lasts (the row is deleted when a launch
    gets through): ``label`` (``HTTP 529``, ``connection``), ``attempts`` (the failed
    launches in a row), ``wake_at`` (epoch s, REAL: the next launch), ``state``
    ``waiting`` | ``probing``, the node holding the probe and since when (epoch s)."""

    __tablename__ = "provider_outages"

    credential: Mapped[str] = mapped_column(primary_key=True)
    label: Mapped[str]
    attempts: Mapped[int] = mapped_column(default=1, server_default=text("1"))
    wake_at: Mapped[float]
    state: Mapped[str]
    prober: Mapped[str | None]
    probe_started: Mapped[float | None]
    closed_by: Mapped[str | None]
    updated_at: Mapped[str]


class Pool(Base):
    """A worker pool: its node (``pool``, the pool node's branch), the worker brief, the
    width, and whether its one review pass has run (0/1)."""

    __tablename__ = "pools"

    pool: Mapped[str] = mapped_column(primary_key=True)
    brief: Mapped[str]
    max_workers: Mapped[int]
    review_done: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    created_at: Mapped[str]


class PoolItem(Base):
    """One item of a worker pool: ``pool`` is the pool node's branch, ``item_id`` the
    item's branch-safe id (its worker node is ``<pool>.<item_id>``); ``status``
    ``open`` | ``claimed`` | ``done`` | ``failed``; ``attempts`` counts claims (at most
    2); ``result`` is one line. Written only by fractal's dispatcher."""

    __tablename__ = "pool_items"
    __table_args__ = (Index("ix_pool_items_pool_status", "pool", "status"),)

    pool: Mapped[str] = mapped_column(primary_key=True)
    item_id: Mapped[str] = mapped_column(primary_key=True)
    position: Mapped[int]
    input: Mapped[str]
    status: Mapped[str]
    worker: Mapped[str | None]
    attempts: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    result: Mapped[str] = mapped_column(default="", server_default=text("''"))
    created_at: Mapped[str]
    claimed_at: Mapped[str | None]
    ended_at: Mapped[str | None]


class Rescue(Base):
    """One rescue ref written before a destructive verb (migration 0006).

    ``ref`` is the full ref name (``refs/fractal/rescue/<branch>/<stamp>``), ``sha`` the
    rescue commit, ``tip`` the branch tip it extends, ``files`` a JSON array of the
    repo-relative paths it saved beyond the tip, ``operation`` the verb (``delete``,
    ``reset``, ``destroy``, ``retire``, ``continue --clean``, ``merge restore``),
    ``actor`` the caller branch or ``operator``; ``created_at`` is the rescue's instant.
    """

    __tablename__ = "rescues"

    rescue_id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str] = mapped_column(index=True)
    operation: Mapped[str]
    ref: Mapped[str] = mapped_column(unique=True)
    sha: Mapped[str]
    tip: Mapped[str]
    files: Mapped[str] = mapped_column(default="[]", server_default=text("'[]'"))
    actor: Mapped[str | None]
    created_at: Mapped[str]


class Merge(Base):
    """One ``fractal node merge`` of ``child`` into ``target`` (migration 0007).

    ``child_sha`` is the child's tip that was merged, ``target_sha`` the target's tip
    before it, ``squash_sha`` the squash commit (NULL until written, and for a conflict).
    ``files`` counts the paths the squash changes (NULL: unknown). ``status`` is
    ``active`` while the merge is under way, ``merged`` once the target's branch contains
    the squash commit (or, ``squash_sha`` NULL, when a merge after one that did not land
    found the target holding all of the child's work already), ``failed`` otherwise
    (``metadata`` says why: a conflict and its files, a hand-back, an interrupted merge
    rolled back). ``actor`` is ``operator`` or the
    acting node.
    """

    __tablename__ = "merges"
    __table_args__ = (Index("ix_merges_target_status", "target", "status"),
                      Index("ix_merges_child_created_at", "child", "created_at"))

    merge_id: Mapped[int] = mapped_column(primary_key=True)
    child: Mapped[str]
    target: Mapped[str]
    child_sha: Mapped[str]
    target_sha: Mapped[str]
    squash_sha: Mapped[str | None]
    files: Mapped[int | None]
    status: Mapped[str]
    actor: Mapped[str | None]
    meta: Mapped[str] = _meta()
    created_at: Mapped[str]
    ended_at: Mapped[str | None]


class InboxAck(Base):
    """An attention item the operator acknowledged (``fractal inbox ack``; migration 0009).

    ``item_key`` names the item (kind, node and the row it is about); ``fingerprint`` its
    state when acknowledged: the item stays hidden while the two still match.
    """

    __tablename__ = "inbox_acks"

    ack_id: Mapped[int] = mapped_column(primary_key=True)
    item_key: Mapped[str] = mapped_column(unique=True)
    fingerprint: Mapped[str]
    created_at: Mapped[str]


class Notification(Base):
    """One attention event handed to the root config's ``notify`` command (migration 0009).

    The row is claimed (inserted) before the command runs, so an event is notified at
    most once; ``batch`` groups the events one run of the command carried; ``status``
    is ``pending`` until the command ends ``completed``, ``failed`` or ``skipped`` (a
    kind ``notify_events`` leaves out); ``meta`` the reason of a failure.
    """

    __tablename__ = "notifications"

    notification_id: Mapped[int] = mapped_column(primary_key=True)
    item_key: Mapped[str] = mapped_column(unique=True)
    fingerprint: Mapped[str]
    kind: Mapped[str]
    node: Mapped[str]
    batch: Mapped[str]
    status: Mapped[str]
    exit_code: Mapped[int | None]
    meta: Mapped[str] = _meta()
    created_at: Mapped[str]
    ended_at: Mapped[str | None]
