"""The dashboard's words and levels: a node's live detail line, its spend gauge, short
durations (pure; the clock is passed in)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from fractal.domain.attention.rules import FOLLOWER_UNTIL
from fractal.domain.usage.windows import until_label

__all__ = ["Gauge", "Level", "Live", "clock_label", "gauge", "live_detail", "shown_agent",
           "subtree_spends"]


def clock_label(seconds: float) -> str:
    """``42s``, ``4m12s``, ``2h05m``, ``3d04h`` (negative reads as 0)."""
    total = max(0, int(seconds))
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    if total < 86400:
        return f"{total // 3600}h{total % 3600 // 60:02d}m"
    return f"{total // 86400}d{total % 86400 // 3600:02d}h"


def shown_agent(pinned: Sequence[str | None] | None, configured: Sequence[str | None],
                default: str) -> str:
    """The agent setting a node's card names, the same for every node: while it has an open
    run, the setting that run pinned at boot (``pinned``: its open iteration's, then the
    run's own); otherwise the one its next run would take (``configured``: its
    ``config.json``'s, then the tree's); the first set one wins, else ``default`` (what a
    run with no setting launches)."""
    pool = pinned if pinned is not None else configured
    return next((s for s in pool if s), default)


@dataclass(frozen=True)
class Live:
    """Where an active node is: run id, iteration n of ``max_iters`` (None unlimited),
    step k of ``steps`` and its name, the step's start (epoch s), a pending gate,
    a pending signal word (``pausing``...), whether its supervisor is gone, and an open
    usage-window wait (``usage_wait``) with the instant it ends (``usage_until`` epoch s,
    None unknown)."""

    run_id: int | None = None
    iteration: int | None = None
    max_iters: int | None = None
    step: int | None = None
    steps: int | None = None
    step_name: str | None = None
    step_started: float | None = None
    gate: bool = False
    signal: str | None = None
    gone: bool = False
    usage_wait: bool = False
    usage_until: float | None = None


def live_detail(status: str, live: Live, now: float, reason: str = "") -> str:
    """The tree's detail text: ``run 3 · iter 2/10 · step 3/5 EXECUTE 4m12s`` for an
    active node, ``awaiting approval`` at a gate, ``waiting for usage window until
    14:05:05Z`` (UTC, the instant the inbox gives, dated when it is not today:
    ``domain.usage.windows.until_label``; ``attention.FOLLOWER_UNTIL`` when no
    window is closed and the node follows another node's probe) while its run waits out a
    usage window, ``supervisor gone`` when provably dead; the last run's ``reason`` for a
    settled node; ``parked`` for a paused one."""
    if status == "active":
        if live.gone:
            return "supervisor gone (any read heals it: the run parks, interrupted)"
        parts = [] if live.run_id is None else [f"run {live.run_id}"]
        if live.iteration is not None:
            parts.append(f"iter {live.iteration}/{live.max_iters or '∞'}")
        if live.gate:
            parts.append("awaiting approval")
        elif live.usage_wait:
            until = FOLLOWER_UNTIL if live.usage_until is None \
                else f"until {until_label(live.usage_until, now)}"
            parts.append(f"waiting for usage window {until}")
        elif live.step is not None:
            of = f"/{live.steps}" if live.steps else ""
            took = "" if live.step_started is None else \
                f" {clock_label(now - live.step_started)}"
            parts.append(f"step {live.step}{of} {live.step_name or ''}{took}".replace("  ", " "))
        if live.signal:
            parts.append(live.signal)
        return " · ".join(parts) or "booting"
    if status == "paused":
        return "parked" + (" · awaiting approval" if live.gate else "")
    return reason


class Level(StrEnum):
    """A spend gauge's colour: under the reserve, in it, at (or past) the cap."""

    OK = "ok"
    RESERVE = "reserve"
    CAP = "cap"


@dataclass(frozen=True)
class Gauge:
    """Spend against a cap: the filled share (0..1) and its level."""

    share: float
    level: Level


def gauge(spent: float | None, cap: float | None, reserve: float | None) -> Gauge | None:
    """The gauge for ``spent`` of ``cap`` USD with a ``reserve`` (USD; None: 10 % of the
    cap). None without a cap. In the reserve from ``cap - reserve`` on; at the cap
    from ``cap`` on. Unknown spend reads as 0 (nothing priced yet)."""
    if cap is None or cap <= 0:
        return None
    used = spent or 0.0
    window = cap * 0.1 if reserve is None else reserve
    level = Level.CAP if used >= cap else Level.RESERVE if used >= cap - window else Level.OK
    return Gauge(min(1.0, used / cap), level)


def subtree_spends(parents: Mapping[int, int | None],
                   own: Mapping[int, float | None]) -> dict[int, float | None]:
    """Each run's spend with its descendant runs' (USD), the figure a run's ``max_cost``
    bounds: ``parents`` maps every run id to the run it was started under (None for
    none), ``own`` each run's own steps' recorded cost (None: no step of it recorded one;
    a run missing from it counts as None). A run's figure is the sum of the known costs
    in its subtree, None when none of them is known (unknown, never 0). A run is always
    started after the run it is started under, so its id is the larger: a link to an id
    not smaller, or to a run outside ``parents``, is ignored (the run counts as a top)."""
    totals: dict[int, float | None] = {run: own.get(run) for run in parents}
    for run in sorted(parents, reverse=True):  # children before their parents
        parent, value = parents[run], totals[run]
        if value is None or parent is None or parent >= run or parent not in totals:
            continue
        above = totals[parent]
        totals[parent] = value if above is None else above + value
    return totals
