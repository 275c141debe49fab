"""``fractal node checks``: the checks a node's loop ran, with the failing-count and
score trends. A plain read through the stdlib reader."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fractal.lifecycle.context import Context

__all__ = ["CHECK_COLUMNS", "ChecksReport", "TrendPoint", "failing_trend", "node_checks"]

CHECK_COLUMNS = ["ref", "kind", "step", "status", "exit", "failures", "passed", "score",
                 "duration", "signature", "command", "output"]


@dataclass(frozen=True)
class TrendPoint:
    """The failing count at the end of iteration ``ref`` (``<run>.<iter>``): the count of the
    iteration's last check (its exit check, when it has one); None when unknown; ``score``
    the score that check reported, None when none."""

    ref: str
    failures: int | None
    score: float | None = None


@dataclass(frozen=True)
class ChecksReport:
    """The node's check rows (oldest first, as dicts keyed by ``CHECK_COLUMNS`` plus ids)
    and the trend of failing counts per iteration."""

    node: str
    rows: list[dict[str, object]]
    trend: list[TrendPoint]

    def trend_line(self) -> str:
        """``failing per iteration: 5.1 3 -> 5.2 2 -> 5.3 0`` (``?`` when unknown), then,
        when any check reported a score, a second line ``score per iteration: 5.1 0.5 ->
        5.2 0.7``; '' without checks."""
        if not self.trend:
            return ""
        points = " -> ".join(f"{p.ref} {'?' if p.failures is None else p.failures}"
                             for p in self.trend)
        line = f"failing per iteration: {points}"
        if any(p.score is not None for p in self.trend):
            scores = " -> ".join(f"{p.ref} {'?' if p.score is None else f'{p.score:g}'}"
                                 for p in self.trend)
            line += f"\nscore per iteration: {scores}"
        return line


def failing_trend(rows: Sequence[dict[str, object]]) -> list[TrendPoint]:
    """One point per iteration, in order, from ``rows`` (oldest first): the last check of
    each iteration wins, so an exit check outranks the gates before it."""
    last: dict[str, TrendPoint] = {}
    for row in rows:
        failures, score = row.get("failures"), row.get("score")
        ref = str(row["ref"])
        last[ref] = TrendPoint(ref, failures if isinstance(failures, int) else None,
                               float(score) if isinstance(score, int | float) else None)
    return list(last.values())


def node_checks(ctx: Context, name: str | None, run: int | None = None) -> ChecksReport:
    """The checks of ``name`` (default: the caller's node), only run ``run``'s when given.

    Raises NodeNotFound, FractalError (the root), StoreError.
    """
    from fractal.store.checkrows import checks  # deferred: start-up cost (14 modules)

    tree, branch = ctx.tree, ctx.target(name)
    rows: list[dict[str, object]] = []
    for row in checks(tree.db_path, branch, run):
        ref = f"{row.run_id}.{row.iter}" if row.iter is not None else str(row.run_id)
        step = "" if row.step is None else f"{row.step} {row.step_name or ''}".strip()
        rows.append({
            "ref": ref, "kind": row.kind, "step": step,
            "status": "passed" if row.exit_code == 0 and not row.signature else "failed",
            "exit": row.exit_code, "failures": row.failures, "passed": row.passed,
            "score": row.score, "duration": row.duration,
            "signature": row.signature, "command": row.command, "output": row.output_path,
            "check_id": row.check_id, "run_id": row.run_id, "iter_id": row.iter_id,
            "step_id": row.step_id, "started_at": row.started_at, "ended_at": row.ended_at,
        })
    return ChecksReport(branch, rows, failing_trend(rows))
