"""Fenced terminal writes: ``UPDATE ... WHERE ended_at IS NULL``, the row count is the verdict.

Two writers may race to close the same row (the loop's own finalize against a crash
heal, a timeout against a pause). Whoever's UPDATE matches first wins; the loser's
UPDATE matches nothing and reports False, leaving the winner's status, exit code and
reason in place: the first writer wins. These helpers run inside the
caller's transaction (a ``store.db.Tx``).
"""

from __future__ import annotations

from fractal.domain.reasons import AWAITING_APPROVAL
from fractal.store.db import Tx
from fractal.store.timefmt import utc_now

__all__ = ["FENCED", "UNPRICED_SUFFIX", "close_open_rows", "close_open_steps", "fenced_close"]

UNPRICED_SUFFIX = "; unpriced"
"""Appended to an abnormally closed step that has a session but no recorded cost (seed)."""

FENCED = {"runs": "run_id", "iterations": "iter_id", "steps": "step_id"}
"""The tables whose rows close once, and each one's key column."""

_CLOSE_STEPS = (
    "UPDATE steps SET status = :status, exit_code = :exit_code, ended_at = :now, "
    "metadata = CASE WHEN approved = '' AND metadata = :waiting THEN :held ELSE '' END || "
    "CASE WHEN session IS NOT NULL AND cost IS NULL THEN :unpriced "
    "ELSE :reason END WHERE node = :node AND ended_at IS NULL")
_PARK_STEPS = ("UPDATE steps SET status = :status, exit_code = :exit_code, metadata = CASE "
               "WHEN approved = '' AND metadata = :waiting THEN :kept ELSE :reason END, "
               "ended_at = :now WHERE node = :node AND ended_at IS NULL")


def fenced_close(tx: Tx, table: str, ident: int, status: str, exit_code: int | None,
                 reason: str, **extra: object) -> bool:
    """Close the open row ``ident`` of ``table`` (a key of FENCED); True when this call won.

    Sets status, exit_code, metadata and ``ended_at`` = now, plus ``extra`` columns,
    only if the row's ``ended_at`` is still NULL.
    """
    sets = "".join(f", {name} = :{name}" for name in extra)
    return tx.run(
        f"UPDATE {table} SET status = :status, exit_code = :exit_code, metadata = :reason, "
        f"ended_at = :now{sets} WHERE {FENCED[table]} = :ident AND ended_at IS NULL",
        {"status": status, "exit_code": exit_code, "reason": reason, "now": utc_now(),
         "ident": ident, **extra}) == 1


def close_open_rows(tx: Tx, node: str, status: str, reason: str, *,
                    exit_code: int, now: str) -> int:
    """Close every open step, iteration and run of ``node``; return the rows closed.

    Steps first, then iterations, then runs, all stamped ``now``. A step with a
    session and no cost gets ``reason`` + UNPRICED_SUFFIX: it plausibly spent money
    nobody recorded (a step that never reported a cost stays NULL, never 0). A gate still
    in its approval wait keeps ``awaiting approval; `` in front of ``reason``: a kill, a
    crash heal or any other end that closes it unapproved is then read as a gate never
    approved (``node merge`` refuses it without ``--force``), as a finish or stop is.
    """
    params = {"node": node, "status": status, "exit_code": exit_code, "reason": reason,
              "now": now, "unpriced": reason + UNPRICED_SUFFIX, "waiting": AWAITING_APPROVAL,
              "held": f"{AWAITING_APPROVAL}; "}
    closed = tx.run(_CLOSE_STEPS, params)
    for table in ("iterations", "runs"):
        closed += tx.run(
            f"UPDATE {table} SET status = :status, exit_code = :exit_code, "
            "metadata = :reason, ended_at = :now WHERE node = :node AND ended_at IS NULL",
            params)
    return closed


def close_open_steps(tx: Tx, node: str, status: str, reason: str, *,
                     exit_code: int | None, now: str) -> int:
    """Close every open step of ``node`` (its iterations and runs stay open); return the
    steps closed. A parked step keeps its session and spend for the resume. A gate still
    in its approval wait (unapproved, reason ``awaiting approval``) keeps that reason in
    front (``awaiting approval; <reason>``), so a resume waits at it again."""
    return tx.run(_PARK_STEPS, {"node": node, "status": status, "exit_code": exit_code,
                                "reason": reason, "now": now, "waiting": AWAITING_APPROVAL,
                                "kept": f"{AWAITING_APPROVAL}; {reason}"})
