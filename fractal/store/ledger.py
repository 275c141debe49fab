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

from fractal.domain.gates import GATES_EVENT, gates_of
from fractal.domain.run.reasons import ABNORMAL_EXIT, AWAITING_APPROVAL
from fractal.store.fence import close_open_rows, fenced_close
from fractal.store.registry import CAP_KEYS, new_id, set_row
from fractal.store.rows import THIS_NODES_RUN, EventRow, IterationRow, RunRow, SignalRow, StepRow
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
        with self._db() as tx:
            now = utc_now()
            close_open_rows(tx, node, "exited", ABNORMAL_EXIT, exit_code=1, now=now)
            return new_id(tx, "runs", {
                "node": node, "agent": agent, "max_cost": max_cost,
                "parent_run_id": parent_run_id, "status": "active", "started_at": now})

    def close_run(self, run_id: int, status: str, exit_code: int | None, reason: str) -> bool:
        """Fenced close of a run; True when this call won (first writer wins)."""
        with self._db() as tx:
            return fenced_close(tx, "runs", run_id, status, exit_code, reason)

    def set_run_cap(self, node: str, max_cost: float | None) -> bool:
        """Record ``max_cost`` (USD; None: uncapped) as the ceiling of the node's open run, a
        retune by ``fractal node update`` or ``config set``; True when a run was open. The
        loop enforces the lower of this record and config.json."""
        with self._db(write=True) as tx:
            return tx.run("UPDATE runs SET max_cost = :cap WHERE node = :node "
                          "AND ended_at IS NULL", {"cap": max_cost, "node": node}) > 0

    def open_run_of(self, node: str) -> RunRow | None:
        """The node's open run (``ended_at`` NULL), newest first, or None."""
        return self._one(RunRow, "SELECT * FROM runs WHERE node = :node AND ended_at IS NULL "
                         "ORDER BY run_id DESC LIMIT 1", {"node": node})

    def run(self, run_id: int) -> RunRow | None:
        """The run row ``run_id``, or None."""
        return self._one(RunRow, "SELECT * FROM runs WHERE run_id = :id", {"id": run_id})

    def last_run(self, node: str) -> RunRow | None:
        """The node's newest run, open or closed, or None (a deleted namesake's runs are
        not the node's: ``rows.THIS_NODES_RUN``)."""
        return self._one(RunRow, f"SELECT * FROM runs WHERE node = :node AND {THIS_NODES_RUN} "
                         "ORDER BY run_id DESC LIMIT 1", {"node": node})

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
        with self._db() as tx:
            return new_id(tx, "iterations", {**values, "started_at": utc_now()})

    def close_iteration(self, iter_id: int, status: str, exit_code: int | None,
                        reason: str) -> bool:
        """Fenced close of an iteration; True when this call won."""
        with self._db() as tx:
            return fenced_close(tx, "iterations", iter_id, status, exit_code, reason)

    def set_iteration_session(self, iter_id: int, session: str | None) -> None:
        """Record the iteration's continuous-mode session id."""
        self._set("iterations", "iter_id", iter_id, {"session": session})

    def set_iteration_model(self, iter_id: int, model: str | None) -> None:
        """Record the model the iteration's agent served."""
        self._set("iterations", "iter_id", iter_id, {"model": model})

    def iterations_of(self, run_id: int) -> list[IterationRow]:
        """Every iteration of the run, in order."""
        return self._all(IterationRow, "SELECT * FROM iterations WHERE run_id = :id "
                         "ORDER BY iter_id", {"id": run_id})

    def open_iteration_of(self, run_id: int) -> IterationRow | None:
        """The run's open iteration, newest first, or None."""
        return self._one(IterationRow, "SELECT * FROM iterations WHERE run_id = :id AND "
                         "ended_at IS NULL ORDER BY iter_id DESC LIMIT 1", {"id": run_id})

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
        with self._db() as tx:
            if gated:  # an older pending twin of this iteration step is voided
                tx.run("UPDATE steps SET approved = NULL WHERE node = :node AND "
                       "iter_id = :iter_id AND step = :step AND approved = ''",
                       {"node": node, "iter_id": iter_id, "step": step})
            return new_id(tx, "steps", {**values, "started_at": utc_now()})

    def close_step(self, step_id: int, status: str, exit_code: int | None, reason: str, *,
                   cost: float | None = None) -> bool:
        """Fenced close of a step; True when this call won.

        ``cost`` (USD) is written only when not None, so a figure flushed earlier
        survives a close that knows none.
        """
        extra = {} if cost is None else {"cost": cost}
        with self._db(single=True) as tx:  # one UPDATE
            return fenced_close(tx, "steps", step_id, status, exit_code, reason, **extra)

    def book_closed_step(self, *, node: str, run_id: int, iter_id: int | None, step: int,
                         step_name: str, status: str, exit_code: int | None, reason: str,
                         cost: float | None) -> int:
        """Insert a step row opened and closed at the same instant; return step_id.

        For steps that never launched (``failed on <STEP>``, ``over budget``).
        """
        with self._db() as tx:
            now = utc_now()
            return new_id(tx, "steps", {
                "node": node, "run_id": run_id, "iter_id": iter_id, "step": step,
                "step_name": step_name, "status": status, "exit_code": exit_code, "cost": cost,
                "metadata": reason, "started_at": now, "ended_at": now})

    def set_step_cost(self, step_id: int, usd: float) -> None:
        """Flush the step's spend so far (USD), open or closed: a killed step keeps it."""
        self._set("steps", "step_id", step_id, {"cost": usd})

    def set_step_usage(self, step_id: int, input_tokens: int, cached_input_tokens: int,
                       output_tokens: int) -> None:
        """Record the step's token usage so far (this attempt's own; the last report wins).

        ``input_tokens`` includes the ``cached_input_tokens`` subset. Open or closed rows.
        """
        self._set("steps", "step_id", step_id, {"input_tokens": input_tokens,
                                                "cached_input_tokens": cached_input_tokens,
                                                "output_tokens": output_tokens})

    def session_usage(self, node: str, session: str) -> tuple[int, int, int] | None:
        """The token usage recorded so far on ``node``'s steps of ``session``: the sums of
        (input, cached input, output) tokens, or None when no step of it recorded any.

        Per-attempt figures add up to the session's total (for codex: the thread's
        cumulative usage before its next launch).
        """
        with self._db(write=False, single=True) as tx:
            row = tx.one("SELECT SUM(input_tokens), SUM(cached_input_tokens), "
                         "SUM(output_tokens), COUNT(*) FROM steps WHERE node = :node AND "
                         "session = :session AND input_tokens IS NOT NULL",
                         {"node": node, "session": session})
        if row is None or not row[3]:
            return None
        return int(row[0] or 0), int(row[1] or 0), int(row[2] or 0)

    def set_step_session(self, step_id: int, session: str | None) -> None:
        """Record the agent session id the step ran in."""
        self._set("steps", "step_id", step_id, {"session": session})

    def set_step_model(self, step_id: int, model: str | None) -> None:
        """Record the model last served to the step."""
        self._set("steps", "step_id", step_id, {"model": model})

    def set_step_process(self, step_id: int, pgid: int, started: float) -> None:
        """Record the agent's process group and its leader's create time (epoch s)."""
        self._set("steps", "step_id", step_id, {"pgid": pgid, "pgid_started": started})

    def approve_step(self, step_id: int) -> bool:
        """Release a pending gate (``approved`` '' -> now); True when this call released it."""
        with self._db() as tx:
            return tx.run("UPDATE steps SET approved = :now WHERE step_id = :id AND "
                          "approved = ''", {"now": utc_now(), "id": step_id}) == 1

    def note_step(self, step_id: int, reason: str) -> None:
        """Set the reason of an open step (a closed row keeps the one it closed with)."""
        with self._db() as tx:
            tx.run("UPDATE steps SET metadata = :reason WHERE step_id = :id AND "
                   "ended_at IS NULL", {"reason": reason, "id": step_id})

    def mark_awaiting_approval(self, step_id: int) -> None:
        """Mark an open gate's row as in its approval wait (reason ``awaiting approval``):
        whoever parks the open steps later (an interruption, a heal) keeps that reason in
        front, so a resume waits at the gate again rather than rerun its agent. The same
        transaction records when the wait began: a ``gate`` event ``started`` (the inbox
        dates the gate by the first one)."""
        with self._db() as tx:
            marked = tx.run("UPDATE steps SET metadata = :reason WHERE step_id = :id AND "
                            "ended_at IS NULL AND approved = ''",
                            {"reason": AWAITING_APPROVAL, "id": step_id})
            row = tx.one("SELECT node, run_id, iter_id FROM steps WHERE step_id = :id",
                         {"id": step_id}) if marked else None
            if row is not None:
                new_id(tx, "events", {"node": row["node"], "event": "gate", "actor": "loop",
                                      "status": "started", "metadata": AWAITING_APPROVAL,
                                      "run_id": row["run_id"], "iter_id": row["iter_id"],
                                      "step_id": step_id, "created_at": utc_now()})

    def pending_approvals(self, node: str) -> list[StepRow]:
        """The node's gated steps awaiting approval, oldest first: unapproved (``approved`` =
        '') and past their agent's turn (reason ``awaiting approval``, kept in front when the
        wait was parked). A gate whose agent still works is not pending yet."""
        return self._all(StepRow, "SELECT * FROM steps WHERE node = :node AND approved = '' "
                         "AND metadata LIKE :waiting ORDER BY step_id",
                         {"node": node, "waiting": f"%{AWAITING_APPROVAL}%"})

    def run_gates(self, node: str, run_id: int) -> tuple[str, ...]:
        """The step names run ``run_id`` held as gates from its start (its ``gates``
        event; ``()`` when it recorded none)."""
        rows = self.events_of(node, run_id, [GATES_EVENT])
        return gates_of(rows[0].meta) if rows else ()

    def approved_steps(self, run_id: int) -> set[str]:
        """The names of run ``run_id``'s steps that have an approved gate row."""
        rows = self._all(StepRow, "SELECT * FROM steps WHERE run_id = :run_id AND "
                         "approved IS NOT NULL AND approved != ''", {"run_id": run_id})
        return {row.step_name for row in rows}

    def step(self, step_id: int) -> StepRow | None:
        """The step row ``step_id``, or None."""
        return self._one(StepRow, "SELECT * FROM steps WHERE step_id = :id", {"id": step_id})

    def steps_of_iteration(self, iter_id: int) -> list[StepRow]:
        """Every step attempt of an iteration, in booking order."""
        return self._all(StepRow, "SELECT * FROM steps WHERE iter_id = :id ORDER BY step_id",
                         {"id": iter_id})

    def open_steps(self, node: str) -> list[StepRow]:
        """The node's steps with ``ended_at`` NULL, in booking order."""
        return self._all(StepRow, "SELECT * FROM steps WHERE node = :node AND ended_at IS NULL "
                         "ORDER BY step_id", {"node": node})

    def close_open(self, node: str, status: str, reason: str, *, exit_code: int = 1,
                   clear_supervisor: bool = False) -> int:
        """Close every open step, iteration and run of ``node`` in one transaction.

        Fenced like every terminal write. Steps that have a session but no cost get
        ``; unpriced`` appended to ``reason`` (they plausibly spent money nobody
        recorded). Returns the number of rows closed. The node's status is untouched:
        a move that closes rows is ``move``. ``clear_supervisor`` also clears the
        node's recorded supervisor in the same transaction (a kill, once it is dead).
        """
        with self._db() as tx:
            now = utc_now()
            closed = close_open_rows(tx, node, status, reason, exit_code=exit_code, now=now)
            if clear_supervisor:
                set_row(tx, "nodes", "node", node, {"supervisor_pid": None,
                                                    "supervisor_started": None,
                                                    "updated_at": now})
            return closed

    # ---- events and signals ------------------------------------------------------

    def add_event(self, node: str, event: str, *, actor: str | None = None,
                  status: str | None = None, metadata: str = "", run_id: int | None = None,
                  iter_id: int | None = None, step_id: int | None = None,
                  exit_code: int | None = None) -> int:
        """Record an event (``commit``, ``pause``, ``orphan``, ...); return event_id."""
        values = {"node": node, "event": event, "actor": actor, "status": status,
                  "metadata": metadata, "run_id": run_id, "iter_id": iter_id,
                  "step_id": step_id, "exit_code": exit_code}
        with self._db() as tx:
            return new_id(tx, "events", {**values, "created_at": utc_now()})

    def end_event(self, event_id: int, status: str, exit_code: int | None = None) -> bool:
        """Settle an ``active`` (or status-less) event; True when this call settled it."""
        with self._db() as tx:
            return tx.run("UPDATE events SET status = :status, exit_code = :exit_code WHERE "
                          "event_id = :id AND (status = 'active' OR status IS NULL)",
                          {"status": status, "exit_code": exit_code, "id": event_id}) == 1

    def events_of(self, node: str, run_id: int, names: Sequence[str]) -> list[EventRow]:
        """The run's events named in ``names``, oldest first."""
        marks = ", ".join(f":n{i}" for i in range(len(names)))
        return self._all(EventRow, f"SELECT * FROM events WHERE node = :node AND "
                         f"run_id = :run_id AND event IN ({marks or 'NULL'}) ORDER BY event_id",
                         {"node": node, "run_id": run_id,
                          **{f"n{i}": name for i, name in enumerate(names)}})

    def add_signal(self, node: str, run_id: int, signal: str, metadata: str = "") -> int:
        """Queue a signal (``pause``, ``finish``, ``stop``, ...) for a run; return signal_id."""
        values = {"node": node, "run_id": run_id, "signal": signal, "metadata": metadata}
        with self._db() as tx:
            return new_id(tx, "signals", {**values, "created_at": utc_now()})

    def signals(self, run_id: int) -> list[SignalRow]:
        """The run's pending signals, oldest first."""
        return self._all(SignalRow, "SELECT * FROM signals WHERE run_id = :id "
                         "ORDER BY signal_id", {"id": run_id})

    def delete_signals(self, run_id: int, signal: str) -> int:
        """Consume every ``signal`` of the run; return how many were deleted."""
        with self._db() as tx:
            return tx.run("DELETE FROM signals WHERE run_id = :id AND signal = :signal",
                          {"id": run_id, "signal": signal})
