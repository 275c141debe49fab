"""The one write of a node's status: ``Transitions.move`` performs a ``Move`` of the table
in ``fractal.domain.states`` as a single ``BEGIN IMMEDIATE`` transaction.

Inside that transaction the move reads the node's status, asks the table whether the move
is legal from it (compare-and-set: nothing at all is written when it is not), then does
everything the move implies: the fenced closes of the open rows its rule names, the exit
notice when it lands on ``exited`` with a run open, the caller's event and signal rows,
the supervisor pid recorded or cleared, and the status itself. A reader therefore sees a
move whole or not at all, and a writer killed half-way leaves the node as it was.

The signal rows a verb writes to ask a running loop for a move (``signal_run``) live here
too: with ``move`` they are the store's side of the control plane (``fractal.control``).
"""

from __future__ import annotations

from typing import NamedTuple

from fractal.domain.states import (
    Closes,
    IllegalMove,
    Move,
    Status,
    SupervisorEffect,
    refusal,
    rule_of,
)
from fractal.domain.values import by_type
from fractal.errors import NodeNotFound
from fractal.store.db import Tx
from fractal.store.fence import close_open_rows, close_open_steps, fenced_close
from fractal.store.outbox import Outbox, insert_exit_notice, insert_notice
from fractal.store.registry import new_id
from fractal.store.timefmt import utc_now

__all__ = ["EventNote", "Moved", "SignalNote", "Transitions"]


@by_type
class EventNote(NamedTuple):
    """An event row a move writes in its transaction (``pause``, ``kill``, ...)."""

    event: str
    actor: str | None = None
    status: str | None = "completed"
    metadata: str = ""
    run_id: int | None = None
    iter_id: int | None = None
    step_id: int | None = None


@by_type
class SignalNote(NamedTuple):
    """A signal row a move queues on ``run_id`` in its transaction (a kill's attribution)."""

    run_id: int
    signal: str
    metadata: str = ""


@by_type
class Moved(NamedTuple):
    """What ``move`` did. ``after`` is None when the move was refused (``why`` says why,
    naming the current status and the moves allowed from it); ``closed`` counts the rows
    it closed; ``notice`` is the uuid of the exit notice it posted, if any."""

    move: Move
    node: str
    before: Status | None
    after: Status | None
    why: str = ""
    closed: int = 0
    notice: str | None = None

    @property
    def ok(self) -> bool:
        return self.after is not None

    def raise_if_refused(self) -> None:
        """Raise NodeNotFound for an unregistered node, IllegalMove for a refused move."""
        if self.ok:
            return
        if self.before is None:
            raise NodeNotFound(f"node {self.node!r} is not registered; create it with "
                               "`fractal node init`")
        raise IllegalMove(self.node, self.move, self.before)


class Transitions(Outbox):
    """The control half of the ledger: ``move`` is the only writer of ``nodes.status`` (a
    node's first status is set when ``register_node`` inserts its row), ``signal_run``
    writes the signal rows that ask a loop for a move (pause, finish, stop)."""

    def move(self, node: str, move: Move, *, to: Status | None = None, reason: str = "",
             exit_code: int | None = 1, run_id: int | None = None, step_id: int | None = None,
             figures: str = "", event: EventNote | None = None,
             signal: SignalNote | None = None,
             supervisor: tuple[int, float | None] | None = None,
             notice: tuple[str, str] | None = None) -> Moved:
        """Perform ``move`` on ``node`` in one transaction; see the module docstring.

        ``to`` picks the landing status among the rule's targets (default: its first).
        By the rule's ``Closes``: STEP closes ``step_id`` (when given) ``paused`` with
        ``exit_code`` and ``reason``; RUN closes ``run_id`` (required) with the landing
        status; OPEN_ROWS closes every open row of the node with the landing status (an
        unpriced step gets ``; unpriced``; ``exit_code`` None stands for 1); OPEN_STEPS landing on
        ``paused`` closes only the open steps, ``paused`` with ``exit_code`` and ``reason``. Every close is fenced: a row someone else
        closed first keeps their values. A landing on ``exited`` with a run open posts
        ``run exited: <reason>`` (``figures`` join its body); ``notice`` (subject, body),
        when given, is posted to the node's outbox instead, whatever the landing (a run's
        end notice with its spend). ``supervisor`` is the
        (pid, create time in epoch s) a RECORD rule stores. Never raises for an illegal
        move (the result says so); raises StoreError when the database fails, and
        ValueError for a RUN move without ``run_id`` or a RECORD move without
        ``supervisor``.
        """
        rule = rule_of(move)
        if rule.closes is Closes.RUN and run_id is None:
            raise ValueError(f"{move.value} closes a run: pass run_id")
        if rule.supervisor is SupervisorEffect.RECORD and supervisor is None:
            raise ValueError(f"{move.value} records the supervisor: pass supervisor")
        with self._db() as conn:
            raw = conn.scalar("SELECT status FROM nodes WHERE node = :node", {"node": node})
            before = None if raw is None else Status(raw)
            why = refusal(move, before, to)
            if why is not None:
                return Moved(move, node, before, None, why=f"node {node}: {why}")
            after = to if to is not None else rule.targets[0]
            assert before is not None  # refusal() refuses an unregistered node
            now = utc_now()
            had_run = _has_open_run(conn, node)
            closed = _close(conn, rule.closes, node, after, reason, exit_code, run_id,
                            step_id, now)
            posted = None
            if notice is not None:
                posted = insert_notice(conn, node, *notice)
            elif after is Status.EXITED and had_run:
                posted = insert_exit_notice(conn, node, reason, figures)
            if event is not None:
                new_id(conn, "events", {
                    "node": node, "event": event.event, "actor": event.actor,
                    "status": event.status, "metadata": event.metadata, "run_id": event.run_id,
                    "iter_id": event.iter_id, "step_id": event.step_id, "created_at": now})
            if signal is not None:
                new_id(conn, "signals", {"node": node, "run_id": signal.run_id,
                                         "signal": signal.signal, "metadata": signal.metadata,
                                      "created_at": now})
            values: dict[str, object] = {"status": after.value, "updated_at": now}
            if rule.supervisor is SupervisorEffect.RECORD and supervisor is not None:
                values.update(supervisor_pid=supervisor[0], supervisor_started=supervisor[1])
            elif rule.supervisor is SupervisorEffect.CLEAR:
                values.update(supervisor_pid=None, supervisor_started=None)
            sets = ", ".join(f"{name} = :{name}" for name in values)
            conn.run(f"UPDATE nodes SET {sets} WHERE node = :_node AND status = :_before",
                     {**values, "_node": node, "_before": before.value})
            return Moved(move, node, before, after, closed=closed, notice=posted)

    def signal_run(self, node: str, run_id: int, signal: str, *, actor: str | None,
                   reason: str) -> int:
        """Queue ``signal`` on ``run_id`` and record its ``completed`` event (metadata
        ``reason``) in one transaction; return the signal_id."""
        with self._db() as conn:
            now = utc_now()
            new_id(conn, "events", {"node": node, "event": signal, "actor": actor,
                                    "status": "completed", "metadata": reason,
                                    "run_id": run_id, "created_at": now})
            return new_id(conn, "signals", {"node": node, "run_id": run_id, "signal": signal,
                                            "metadata": reason, "created_at": now})

    def park_step(self, step_id: int, node: str, exit_code: int | None, reason: str) -> bool:
        """Close a step ``paused`` and park its node in one PARK move, so a supervisor
        killed while it parks leaves a parked node, never an active node around a paused
        step. True when this call closed the step (fenced; refused moves write nothing)."""
        return self.move(node, Move.PARK, step_id=step_id, exit_code=exit_code,
                         reason=reason).closed == 1


def _has_open_run(conn: Tx, node: str) -> bool:
    return conn.one("SELECT run_id FROM runs WHERE node = :node AND ended_at IS NULL LIMIT 1",
                    {"node": node}) is not None


def _close(conn: Tx, closes: Closes, node: str, after: Status, reason: str,
           exit_code: int | None, run_id: int | None, step_id: int | None, now: str) -> int:
    """The fenced closes of a move; returns how many rows this call closed."""
    if closes is Closes.STEP and step_id is not None:
        return int(fenced_close(conn, "steps", step_id, Status.PAUSED.value, exit_code,
                                reason))
    if closes is Closes.RUN and run_id is not None:
        return int(fenced_close(conn, "runs", run_id, after.value, exit_code, reason))
    if closes is Closes.OPEN_STEPS and after is Status.PAUSED:
        return close_open_steps(conn, node, Status.PAUSED.value, reason, exit_code=exit_code,
                                now=now)
    if closes in (Closes.OPEN_ROWS, Closes.OPEN_STEPS):
        return close_open_rows(conn, node, after.value, reason,
                               exit_code=1 if exit_code is None else exit_code, now=now)
    return 0
