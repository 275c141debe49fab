"""The write API of the central database: the run > iteration > step ledger.

Each method is one short ``BEGIN IMMEDIATE`` transaction (never held across an agent
run) and returns plain values or frozen rows (``fractal.store.rows``), never ORM
objects. Terminal writes are fenced, ``UPDATE ... WHERE ended_at IS NULL``, and the
row count is the verdict: the first writer wins and later closes return False.
Row statuses are ``fractal.domain.states.Status`` values. Reasons are stored as given;
callers clip them to 250 characters. A node's status changes only through ``move``
(``Transitions``); the node registry, the transaction helpers and WAL maintenance come
from ``Registry``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select, update

from fractal.domain.outcome import ABNORMAL_EXIT, AWAITING_APPROVAL
from fractal.store.fence import close_open_rows, fenced_close
from fractal.store.models import Event, Iteration, Run, Signal, Step
from fractal.store.registry import CAP_KEYS, new_id
from fractal.store.rows import EventRow, IterationRow, RunRow, SignalRow, StepRow
from fractal.store.timefmt import utc_now
from fractal.store.transition import Transitions

__all__ = ["CAP_KEYS", "Ledger"]


class Ledger(Transitions):
    """Writes and point reads on the tree database at ``db_path`` (created on first use).

    ``Ledger(db_path)``; every method raises StoreError when the database cannot be
    opened, migrated or written. Node registry methods are inherited from Registry.
    """

    # ---- runs --------------------------------------------------------------------

    def open_run(self, node: str, *, agent: str | None, max_cost: float | None,
                 parent_run_id: int | None) -> int:
        """Open an ``active`` run of ``node``; return its run_id.

        In the same transaction, closes the node's stranded open steps, iterations and
        runs as ``exited``/1 with reason ABNORMAL_EXIT (the loop that opened them died
        without closing them). ``max_cost`` is
        the USD cap armed at launch; ``parent_run_id`` the parent's active run.
        """
        with self._tx() as conn:
            now = utc_now()
            close_open_rows(conn, node, "exited", ABNORMAL_EXIT, exit_code=1, now=now)
            return new_id(conn, Run, {
                "node": node, "agent": agent, "max_cost": max_cost,
                "parent_run_id": parent_run_id, "status": "active", "started_at": now})

    def close_run(self, run_id: int, status: str, exit_code: int | None, reason: str) -> bool:
        """Fenced close of a run; True when this call won (first writer wins)."""
        with self._tx() as conn:
            return fenced_close(conn, Run, Run.run_id, run_id, status, exit_code, reason)

    def open_run_of(self, node: str) -> RunRow | None:
        """The node's open run (``ended_at`` NULL), newest first, or None."""
        return self._one(RunRow, select(Run.__table__).where(
            Run.node == node, Run.ended_at.is_(None)).order_by(Run.run_id.desc()))

    def run(self, run_id: int) -> RunRow | None:
        """The run row ``run_id``, or None."""
        return self._one(RunRow, select(Run.__table__).where(Run.run_id == run_id))

    def last_run(self, node: str) -> RunRow | None:
        """The node's newest run, open or closed, or None."""
        return self._one(RunRow, select(Run.__table__).where(Run.node == node)
                         .order_by(Run.run_id.desc()))

    def active_run_id(self, node: str) -> int | None:
        """The run_id of the node's open run, or None (children chain on it)."""
        row = self.open_run_of(node)
        return None if row is None else row.run_id

    # ---- iterations --------------------------------------------------------------

    def open_iteration(self, node: str, run_id: int, iteration: int, *,
                       agent: str | None, model: str | None) -> int:
        """Open an ``active`` iteration (``iteration`` is 1-based in the run); return iter_id."""
        values = {"node": node, "run_id": run_id, "iter": iteration, "agent": agent,
                  "model": model, "status": "active"}
        with self._tx() as conn:
            return new_id(conn, Iteration, {**values, "started_at": utc_now()})

    def close_iteration(self, iter_id: int, status: str, exit_code: int | None,
                        reason: str) -> bool:
        """Fenced close of an iteration; True when this call won."""
        with self._tx() as conn:
            return fenced_close(conn, Iteration, Iteration.iter_id, iter_id, status,
                                exit_code, reason)

    def set_iteration_session(self, iter_id: int, session: str | None) -> None:
        """Record the iteration's continuous-mode session id."""
        self._set(Iteration.iter_id, iter_id, {"session": session})

    def set_iteration_model(self, iter_id: int, model: str | None) -> None:
        """Record the model the iteration's agent served."""
        self._set(Iteration.iter_id, iter_id, {"model": model})

    def iterations_of(self, run_id: int) -> list[IterationRow]:
        """Every iteration of the run, in order."""
        return self._all(IterationRow, select(Iteration.__table__).where(
            Iteration.run_id == run_id).order_by(Iteration.iter_id))

    def open_iteration_of(self, run_id: int) -> IterationRow | None:
        """The run's open iteration, newest first, or None."""
        return self._one(IterationRow, select(Iteration.__table__).where(
            Iteration.run_id == run_id, Iteration.ended_at.is_(None))
            .order_by(Iteration.iter_id.desc()))

    # ---- steps -------------------------------------------------------------------

    def open_step(self, *, node: str, run_id: int, iter_id: int | None, step: int,
                  step_name: str, agent: str | None, model: str | None, session: str | None,
                  gated: bool = False) -> int:
        """Open an ``active`` step attempt; return step_id.

        ``step`` is the 1-based position (SYNC: the step it precedes, 0 for a drain
        wait). ``gated`` arms an approval gate (``approved`` = '' pending, else NULL).
        """
        values = {"node": node, "run_id": run_id, "iter_id": iter_id, "step": step,
                  "step_name": step_name, "agent": agent, "model": model, "session": session,
                  "status": "active", "approved": "" if gated else None}
        with self._tx() as conn:
            if gated:  # an older pending twin of this iteration step is voided
                conn.execute(update(Step).where(
                    Step.node == node, Step.iter_id == iter_id, Step.step == step,
                    Step.approved == "").values(approved=None))
            return new_id(conn, Step, {**values, "started_at": utc_now()})

    def close_step(self, step_id: int, status: str, exit_code: int | None, reason: str, *,
                   cost: float | None = None) -> bool:
        """Fenced close of a step; True when this call won.

        ``cost`` (USD) is written only when not None, so a figure flushed earlier
        survives a close that knows none.
        """
        extra = {} if cost is None else {"cost": cost}
        with self._tx() as conn:
            return fenced_close(conn, Step, Step.step_id, step_id, status, exit_code,
                                reason, **extra)

    def book_closed_step(self, *, node: str, run_id: int, iter_id: int | None, step: int,
                         step_name: str, status: str, exit_code: int | None, reason: str,
                         cost: float | None) -> int:
        """Insert a step row opened and closed at the same instant; return step_id.

        For steps that never launched (``failed on <STEP>``, ``over budget``).
        """
        with self._tx() as conn:
            now = utc_now()
            return new_id(conn, Step, {
                "node": node, "run_id": run_id, "iter_id": iter_id, "step": step,
                "step_name": step_name, "status": status, "exit_code": exit_code, "cost": cost,
                "meta": reason, "started_at": now, "ended_at": now})

    def set_step_cost(self, step_id: int, usd: float) -> None:
        """Flush the step's spend so far (USD), open or closed: a killed step keeps it."""
        self._set(Step.step_id, step_id, {"cost": usd})

    def set_step_usage(self, step_id: int, input_tokens: int, cached_input_tokens: int,
                       output_tokens: int) -> None:
        """Record the step's token usage so far (this attempt's own; the last report wins).

        ``input_tokens`` includes the ``cached_input_tokens`` subset. Open or closed rows.
        """
        self._set(Step.step_id, step_id, {"input_tokens": input_tokens,
                                          "cached_input_tokens": cached_input_tokens,
                                          "output_tokens": output_tokens})

    def session_usage(self, node: str, session: str) -> tuple[int, int, int] | None:
        """The token usage recorded so far on ``node``'s steps of ``session``: the sums of
        (input, cached input, output) tokens, or None when no step of it recorded any.

        Per-attempt figures add up to the session's total (for codex: the thread's
        cumulative usage before its next launch).
        """
        stmt = select(func.sum(Step.input_tokens), func.sum(Step.cached_input_tokens),
                      func.sum(Step.output_tokens), func.count()).where(
            Step.node == node, Step.session == session, Step.input_tokens.is_not(None))
        with self._tx() as conn:
            row = conn.execute(stmt).one()
        if not row[3]:
            return None
        return int(row[0] or 0), int(row[1] or 0), int(row[2] or 0)

    def set_step_session(self, step_id: int, session: str | None) -> None:
        """Record the agent session id the step ran in."""
        self._set(Step.step_id, step_id, {"session": session})

    def set_step_model(self, step_id: int, model: str | None) -> None:
        """Record the model last served to the step."""
        self._set(Step.step_id, step_id, {"model": model})

    def set_step_process(self, step_id: int, pgid: int, started: float) -> None:
        """Record the agent's process group and its leader's create time (epoch s)."""
        self._set(Step.step_id, step_id, {"pgid": pgid, "pgid_started": started})

    def approve_step(self, step_id: int) -> bool:
        """Release a pending gate (``approved`` '' -> now); True when this call released it."""
        stmt = (update(Step).where(Step.step_id == step_id, Step.approved == "")
                .values(approved=utc_now()))
        with self._tx() as conn:
            return conn.execute(stmt).rowcount == 1

    def note_step(self, step_id: int, reason: str) -> None:
        """Set the reason of an open step (a closed row keeps the one it closed with)."""
        stmt = (update(Step).where(Step.step_id == step_id, Step.ended_at.is_(None))
                .values(meta=reason))
        with self._tx() as conn:
            conn.execute(stmt)

    def mark_awaiting_approval(self, step_id: int) -> None:
        """Mark an open gate's row as in its approval wait (reason ``awaiting approval``):
        whoever parks the open steps later (an interruption, a heal) keeps that reason in
        front, so a resume waits at the gate again rather than rerun its agent."""
        stmt = (update(Step).where(Step.step_id == step_id, Step.ended_at.is_(None),
                                   Step.approved == "").values(meta=AWAITING_APPROVAL))
        with self._tx() as conn:
            conn.execute(stmt)

    def pending_approvals(self, node: str) -> list[StepRow]:
        """The node's gated steps still awaiting approval (``approved`` = ''), oldest first."""
        return self._all(StepRow, select(Step.__table__).where(
            Step.node == node, Step.approved == "").order_by(Step.step_id))

    def step(self, step_id: int) -> StepRow | None:
        """The step row ``step_id``, or None."""
        return self._one(StepRow, select(Step.__table__).where(Step.step_id == step_id))

    def steps_of_iteration(self, iter_id: int) -> list[StepRow]:
        """Every step attempt of an iteration, in booking order."""
        return self._all(StepRow, select(Step.__table__).where(Step.iter_id == iter_id)
                         .order_by(Step.step_id))

    def open_steps(self, node: str) -> list[StepRow]:
        """The node's steps with ``ended_at`` NULL, in booking order."""
        return self._all(StepRow, select(Step.__table__).where(
            Step.node == node, Step.ended_at.is_(None)).order_by(Step.step_id))

    def close_open(self, node: str, status: str, reason: str, *, exit_code: int = 1) -> int:
        """Close every open step, iteration and run of ``node`` in one transaction.

        Fenced like every terminal write. Steps that have a session but no cost get
        ``; unpriced`` appended to ``reason`` (they plausibly spent money nobody
        recorded). Returns the number of rows closed. The node's status is untouched:
        a move that closes rows is ``move``.
        """
        with self._tx() as conn:
            return close_open_rows(conn, node, status, reason, exit_code=exit_code,
                                   now=utc_now())

    # ---- events and signals ------------------------------------------------------

    def add_event(self, node: str, event: str, *, actor: str | None = None,
                  status: str | None = None, metadata: str = "", run_id: int | None = None,
                  iter_id: int | None = None, step_id: int | None = None,
                  exit_code: int | None = None) -> int:
        """Record an event (``commit``, ``pause``, ``orphan``, ...); return event_id."""
        values = {"node": node, "event": event, "actor": actor, "status": status,
                  "meta": metadata, "run_id": run_id, "iter_id": iter_id, "step_id": step_id,
                  "exit_code": exit_code}
        with self._tx() as conn:
            return new_id(conn, Event, {**values, "created_at": utc_now()})

    def end_event(self, event_id: int, status: str, exit_code: int | None = None) -> bool:
        """Settle an ``active`` (or status-less) event; True when this call settled it."""
        stmt = (update(Event).where(Event.event_id == event_id,
                                    (Event.status == "active") | Event.status.is_(None))
                .values(status=status, exit_code=exit_code))
        with self._tx() as conn:
            return conn.execute(stmt).rowcount == 1

    def events_of(self, node: str, run_id: int, names: Sequence[str]) -> list[EventRow]:
        """The run's events named in ``names``, oldest first."""
        return self._all(EventRow, select(Event.__table__).where(
            Event.node == node, Event.run_id == run_id, Event.event.in_(list(names)))
            .order_by(Event.event_id))

    def add_signal(self, node: str, run_id: int, signal: str, metadata: str = "") -> int:
        """Queue a signal (``pause``, ``finish``, ``stop``, ...) for a run; return signal_id."""
        values = {"node": node, "run_id": run_id, "signal": signal, "meta": metadata}
        with self._tx() as conn:
            return new_id(conn, Signal, {**values, "created_at": utc_now()})

    def signals(self, run_id: int) -> list[SignalRow]:
        """The run's pending signals, oldest first."""
        return self._all(SignalRow, select(Signal.__table__).where(Signal.run_id == run_id)
                         .order_by(Signal.signal_id))

    def delete_signals(self, run_id: int, signal: str) -> int:
        """Consume every ``signal`` of the run; return how many were deleted."""
        stmt = delete(Signal).where(Signal.run_id == run_id, Signal.signal == signal)
        with self._tx() as conn:
            return conn.execute(stmt).rowcount
