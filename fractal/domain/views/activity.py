"""How ``fractal node activity`` shows its rows on a terminal: the repeats an early
failure leaves are collapsed into one line each (pure: rows in, rows out).

A step that fails early makes the loop book every later step of the iteration as not run
(``stopped``, ``failed on PLAN``): a start and an end row each, at one instant, all alike.
The view folds such a step's start row into its end row, then shows consecutive rows
alike but for their step, instant, duration, cost and ids as one: the newest, its step
column spanning them (``2 EXECUTE .. 9 DOCS``), its reason counting them (``(x8)``). The
ledger keeps every row, and so do ``--csv`` and ``--json`` (exports, not views).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["SAME", "collapse_repeats"]

SAME = ("node", "kind", "event", "ref", "status", "exit", "reason")
"""The columns two rows must share to be shown as one."""


def _booked_start(row: Mapping[str, object], above: Mapping[str, object] | None) -> bool:
    """True for the start row of a step booked without running: its own end row is the row
    right above it (newest first) and carries the same instant."""
    return (above is not None and row.get("kind") == "step" and row.get("event") == "start"
            and above.get("event") == "end" and row.get("step_id") is not None
            and above.get("step_id") == row.get("step_id")
            and above.get("timestamp") == row.get("timestamp"))


def collapse_repeats(rows: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """``rows`` (activity rows as ``lifecycle.reads.nodes.activity`` gives them, newest first) as
    the terminal table shows them: each booked-without-running step's start row folded
    into its end row, then each run of consecutive rows equal on ``SAME`` shown as its
    newest row, with ``step`` ``<oldest> .. <newest>`` (when they differ) and `` (xN)``
    after ``reason``. A run of one row is shown as it is."""
    kept = [row for i, row in enumerate(rows)
            if not _booked_start(row, rows[i - 1] if i else None)]
    groups: list[list[Mapping[str, object]]] = []
    for row in kept:
        if groups and all(groups[-1][0].get(c) == row.get(c) for c in SAME):
            groups[-1].append(row)
        else:
            groups.append([row])
    out: list[dict[str, object]] = []
    for group in groups:
        shown = dict(group[0])
        if len(group) > 1:
            newest, oldest = str(group[0].get("step") or ""), str(group[-1].get("step") or "")
            shown["step"] = newest if newest == oldest else f"{oldest} .. {newest}"
            reason = str(shown.get("reason") or "")
            shown["reason"] = f"{reason} (x{len(group)})".lstrip()
        out.append(shown)
    return out
