"""Fenced terminal writes: ``UPDATE ... WHERE ended_at IS NULL``, the row count is the verdict.

Two writers may race to close the same row (the loop's own finalize against a crash
heal, a timeout against a pause). Whoever's UPDATE matches first wins; the loser's
UPDATE matches nothing and reports False, leaving the winner's status, exit code and
reason in place: the first writer wins. These helpers run inside the
caller's transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, case, literal, update

from fractal.domain.outcome import AWAITING_APPROVAL
from fractal.store.models import Iteration, Run, Step
from fractal.store.timefmt import utc_now

__all__ = ["UNPRICED_SUFFIX", "close_open_rows", "close_open_steps", "fenced_close"]

UNPRICED_SUFFIX = "; unpriced"
"""Appended to an abnormally closed step that has a session but no recorded cost (seed)."""


def fenced_close(conn: Connection, model: Any, key: Any, ident: int, status: str,
                 exit_code: int | None, reason: str, **extra: object) -> bool:
    """Close the open row ``model`` whose ``key`` is ``ident``; True when this call won.

    Sets status, exit_code, metadata and ``ended_at`` = now, plus ``extra`` columns,
    only if the row's ``ended_at`` is still NULL.
    """
    stmt = (update(model).where(key == ident, model.ended_at.is_(None))
            .values(status=status, exit_code=exit_code, meta=reason, ended_at=utc_now(),
                    **extra))
    return conn.execute(stmt).rowcount == 1


def close_open_rows(conn: Connection, node: str, status: str, reason: str, *,
                    exit_code: int, now: str) -> int:
    """Close every open step, iteration and run of ``node``; return the rows closed.

    Steps first, then iterations, then runs, all stamped ``now``. A step with a
    session and no cost gets ``reason`` + UNPRICED_SUFFIX: it plausibly spent money
    nobody recorded (a step that never reported a cost stays NULL, never 0).
    """
    unpriced = and_(Step.session.is_not(None), Step.cost.is_(None))
    closed = conn.execute(
        update(Step).where(Step.node == node, Step.ended_at.is_(None)).values(
            status=status, exit_code=exit_code, ended_at=now,
            meta=case((unpriced, literal(reason + UNPRICED_SUFFIX)), else_=literal(reason))),
    ).rowcount
    for model in (Iteration, Run):
        closed += conn.execute(
            update(model).where(model.node == node, model.ended_at.is_(None))
            .values(status=status, exit_code=exit_code, meta=reason, ended_at=now),
        ).rowcount
    return closed


def close_open_steps(conn: Connection, node: str, status: str, reason: str, *,
                     exit_code: int | None, now: str) -> int:
    """Close every open step of ``node`` (its iterations and runs stay open); return the
    steps closed. A parked step keeps its session and spend for the resume. A gate still
    in its approval wait (unapproved, reason ``awaiting approval``) keeps that reason in
    front (``awaiting approval; <reason>``), so a resume waits at it again."""
    waiting = and_(Step.approved == "", Step.meta == AWAITING_APPROVAL)
    return int(conn.execute(
        update(Step).where(Step.node == node, Step.ended_at.is_(None)).values(
            status=status, exit_code=exit_code, ended_at=now,
            meta=case((waiting, literal(f"{AWAITING_APPROVAL}; {reason}")),
                      else_=literal(reason)))).rowcount)
