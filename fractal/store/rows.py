"""Frozen row values returned by the store: the ledger and the fast reader share them.

Field names follow the SQL column names, except the SQL ``metadata`` column, which is
``meta`` here as on the models (``metadata`` is reserved by SQLAlchemy). Timestamps are
the stored ISO-8601 UTC text (see ``timefmt``); costs are USD with ``None`` meaning
unknown, never zero. Node, run, iteration and step rows carry their ``status`` as a
``Status`` member. Stdlib and ``fractal.domain`` only: the fast read path imports this
module.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fractal.domain.states import Status

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "ActivityRow",
    "EventRow",
    "IterationRow",
    "MessageRow",
    "NodeRow",
    "RunRow",
    "SignalRow",
    "StepRow",
    "build",
]

R = TypeVar("R", bound="DataclassInstance")

_SQL_NAME = {"meta": "metadata"}


class Keyed(Protocol):
    """Anything indexable by column name: ``sqlite3.Row``, SQLAlchemy ``RowMapping``."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True)
class NodeRow:
    """One registered node (the ``nodes`` table). Caps are ``None`` when unlimited."""

    node_id: int
    node: str
    parent: str | None
    title: str | None
    status: Status
    worktree: str | None
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


@dataclass(frozen=True)
class RunRow:
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


@dataclass(frozen=True)
class IterationRow:
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


@dataclass(frozen=True)
class StepRow:
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


@dataclass(frozen=True)
class SignalRow:
    """A pending signal (pause, finish, stop, ...) addressed to one run."""

    signal_id: int
    node: str
    run_id: int
    signal: str
    meta: str
    created_at: str


@dataclass(frozen=True)
class EventRow:
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


@dataclass(frozen=True)
class MessageRow:
    """A notice on a node's channel (``outbox``)."""

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


@dataclass(frozen=True)
class ActivityRow:
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


def build(cls: type[R], mapping: Keyed) -> R:
    """Build the row dataclass ``cls`` from a column-name mapping.

    ``mapping`` is keyed by SQL column names (a ``sqlite3.Row`` or a SQLAlchemy
    ``RowMapping``); extra keys are ignored. Raises KeyError naming a missing column and
    ValueError for a status outside the ``Status`` vocabulary.
    """
    values = {f.name: mapping[_SQL_NAME.get(f.name, f.name)] for f in fields(cls)}
    if cls in _STATUS_ROWS:
        values["status"] = Status(values["status"])
    return cls(**values)


_STATUS_ROWS: frozenset[type[Any]] = frozenset({NodeRow, RunRow, IterationRow, StepRow})
"""Row classes whose ``status`` column is read into a ``Status`` member."""
