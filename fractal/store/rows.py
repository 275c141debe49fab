"""Frozen row values returned by the store: the ledger and the fast reader share them.

Field names follow the SQL column names, except the SQL ``metadata`` column, which is
``meta`` here as on the models (``metadata`` is reserved by SQLAlchemy). Timestamps are
the stored ISO-8601 UTC text (see ``timefmt``); costs are USD with ``None`` meaning
unknown, never zero. Node, run, iteration and step rows carry their ``status`` as a
``Status`` member. Stdlib and ``fractal.domain`` only: the fast read path imports this
module.

The rows are ``NamedTuple`` classes rather than frozen dataclasses: as immutable, with
the same keyword constructor, attribute access and ``Name(field=...)`` repr, but
defining them costs a fraction (a frozen dataclass compiles six generated methods per
class at import, and every fractal process, each supervisor and each CLI call, imports
this module). Use ``row._replace(...)`` for a changed copy and ``columns(cls)`` for the
SQL column list.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, TypeVar

from fractal.domain.states import Status

__all__ = [
    "THIS_NODES_RUN",
    "ActivityRow",
    "EventRow",
    "IterationRow",
    "MessageRow",
    "NodeRow",
    "RunRow",
    "SignalRow",
    "StepRow",
    "born_since",
    "build",
    "columns",
]

R = TypeVar("R", bound=tuple[Any, ...])
"""A row class: every class here is a ``NamedTuple``."""

_SQL_NAME = {"meta": "metadata"}


class Keyed(Protocol):
    """Anything indexable by column name: ``sqlite3.Row``, SQLAlchemy ``RowMapping``."""

    def __getitem__(self, key: str, /) -> Any: ...


class NodeRow(NamedTuple):
    """One registered node (the ``nodes`` table). Caps are ``None`` when unlimited."""

    node_id: int
    node: str
    parent: str | None
    title: str | None
    status: Status
    worktree: str | None
    """Relative to the clone (``Tree.worktree_at`` reads it); absolute in a row an older
    fractal wrote outside the ``.worktrees`` layout."""
    max_cost: float | None
    max_depth: int | None
    max_children: int | None
    max_descendants: int | None
    tmux_session: str | None
    tmux_socket: str | None
    supervisor_pid: int | None
    supervisor_started: float | None
    created_at: str
    updated_at: str | None
    host: str | None = None
    """The machine owning the node's worktree and processes; None: this one (a row from
    before migration 0017, or a tree on one machine)."""


class RunRow(NamedTuple):
    """One launch of a node's loop; ``ended_at`` is ``None`` while it is open."""

    run_id: int
    node: str
    parent_run_id: int | None
    agent: str | None
    max_cost: float | None
    status: Status
    exit_code: int | None
    meta: str
    started_at: str
    ended_at: str | None


class IterationRow(NamedTuple):
    """One pass through the step files; ``iter`` is 1-based within its run."""

    iter_id: int
    node: str
    run_id: int
    iter: int
    agent: str | None
    model: str | None
    session: str | None
    status: Status
    exit_code: int | None
    meta: str
    started_at: str
    ended_at: str | None


class StepRow(NamedTuple):
    """One launch attempt of a step (SYNC included).

    ``approved``: ``None`` no gate, ``''`` pending, an ISO timestamp once approved.
    ``pgid``/``pgid_started`` name the agent's process group and its leader's create
    time (epoch seconds) so a reaper can refuse a recycled pid. The token counts are
    the attempt's own usage (input includes the cached subset), ``None`` when unreported.
    """

    step_id: int
    node: str
    iter_id: int | None
    run_id: int
    step: int
    step_name: str
    agent: str | None
    model: str | None
    session: str | None
    status: Status
    exit_code: int | None
    cost: float | None
    approved: str | None
    pgid: int | None
    pgid_started: float | None
    meta: str
    started_at: str
    ended_at: str | None
    input_tokens: int | None
    cached_input_tokens: int | None
    output_tokens: int | None


class SignalRow(NamedTuple):
    """A pending signal (pause, finish, stop, ...) addressed to one run."""

    signal_id: int
    node: str
    run_id: int
    signal: str
    meta: str
    created_at: str


class EventRow(NamedTuple):
    """One observability event (``init``, ``pause``, ``resume``, ``commit``, ...)."""

    event_id: int
    node: str
    run_id: int | None
    iter_id: int | None
    step_id: int | None
    event: str
    actor: str | None
    status: str | None
    exit_code: int | None
    meta: str
    created_at: str


class MessageRow(NamedTuple):
    """A message on ``node``'s ``channel`` (e.g. an ``outbox`` notice); see
    ``models.Message``."""

    message_id: int
    message_uuid: str
    node: str
    channel: str
    sender: str | None
    priority: int
    subject: str
    data: str
    meta: str
    created_at: str
    parent_message_uuid: str | None = None
    unsent_at: str | None = None


class ActivityRow(NamedTuple):
    """One row of the ``activity`` view.

    ``kind`` is ``run|iteration|step|check|event``; ``event`` is ``start|end`` for the first
    three, ``exit-check|gate`` for checks and the event name for events. ``duration`` (seconds, 3 dp) is set on end
    rows only; ``cost`` (USD) on step, iteration and run end rows, ``None`` when no
    step recorded one. ``event_id`` is set on event rows only.
    """

    timestamp: str
    node: str
    kind: str
    event: str
    run_id: int | None
    iter_id: int | None
    iter: int | None
    step_id: int | None
    step: int | None
    step_name: str | None
    status: str | None
    exit_code: int | None
    meta: str
    duration: float | None
    cost: float | None
    actor: str | None
    event_id: int | None


def _field_names(cls: type[tuple[Any, ...]]) -> tuple[str, ...]:
    names: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]  # a NamedTuple class
    return names


THIS_NODES_RUN = ("runs.started_at >= COALESCE((SELECT born.created_at FROM nodes AS born "
                  "WHERE born.node = runs.node), '')")
"""SQL condition on a ``runs`` row: it belongs to the node registered under its name now,
not to a deleted namesake. Rows are keyed by name, and a name is free again once its
node is deleted, so a run counts for the node only if it began at or after the node's
registration (``nodes.created_at``; the store's ISO text sorts in time order)."""


def born_since(created_at: str | None, instant: str | None) -> bool:
    """True when a row stamped ``instant`` (stored ISO text) is the registered node's own:
    at or after its registration ``created_at`` (None: no node, every row counts; a
    row without an instant counts too). See ``THIS_NODES_RUN``."""
    return created_at is None or instant is None or instant >= created_at


def columns(cls: type[tuple[Any, ...]]) -> list[str]:
    """The SQL column names of row class ``cls``'s fields, in order (``meta`` reads the
    ``metadata`` column)."""
    return [_SQL_NAME.get(name, name) for name in _field_names(cls)]


def build(cls: type[R], mapping: Keyed) -> R:
    """Build the row ``cls`` from a column-name mapping.

    ``mapping`` is keyed by SQL column names (a ``sqlite3.Row`` or a SQLAlchemy
    ``RowMapping``); extra keys are ignored. Raises KeyError naming a missing column and
    ValueError for a status outside the ``Status`` vocabulary.
    """
    values = {name: mapping[_SQL_NAME.get(name, name)] for name in _field_names(cls)}
    if cls in _STATUS_ROWS:
        values["status"] = Status(values["status"])
    return cls(**values)


_STATUS_ROWS: frozenset[type[Any]] = frozenset({NodeRow, RunRow, IterationRow, StepRow})
"""Row classes whose ``status`` column is read into a ``Status`` member."""
