"""Cost-ceiling arithmetic: caps, the per-step budget, reserve mode, labels and reasons.

The user-facing rules are in docs/budgets.md (the keys, the per-step budget, reserve mode,
how a budget ends a run). Pure: spend figures (USD, as recorded) in, decisions and strings out.
Money is rounded to 4 decimal places wherever it is compared or shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ANCESTOR_STEM",
    "RESERVE_SHARE",
    "RESERVE_STEM",
    "SUBTREE_STEM",
    "WINDDOWN_STEM",
    "Caps",
    "Landing",
    "ancestor_reason",
    "boundary_reason",
    "caps_of",
    "ceiling_reason",
    "cost_budget_label",
    "default_reserve",
    "enforced_caps",
    "is_budget_reason",
    "landing",
    "reserve_cause",
    "round_usd",
    "run_remaining",
    "step_budget",
    "usd",
    "usd4",
]

RESERVE_SHARE = 0.10
"""The default reserve: 10% of ``max_cost``."""

RESERVE_STEM = "cost budget reserve reached"
SUBTREE_STEM = "subtree cost budget reached"
ANCESTOR_STEM = "ancestor cost budget reached"
WINDDOWN_STEM = "cost budget exceeded in finish wind-down"

# A budget reason is one of the stems followed by its figures: "<stem> (spent $1.2345 ...".
# Free text that merely mentions a budget never matches: reasons are classified by shape, not by words.
_BUDGET_SHAPE = re.compile(
    rf"^(?:{re.escape(RESERVE_STEM)}|{re.escape(SUBTREE_STEM)}|{re.escape(ANCESTOR_STEM)})"
    r" \(spent \$\d+(?:\.\d+)? ")
_VIA = re.compile(r"\(via finish of ([^)\s]+)\)\s*$")


def round_usd(amount: float) -> float:
    """``amount`` rounded to 4 decimal places (USD)."""
    return round(amount, 4)


def usd(amount: float) -> str:
    """A configured amount, compact: ``$100``, ``$0.5``, ``$87.6543`` (at most 4 dp)."""
    text = f"{round_usd(amount):.4f}".rstrip("0").rstrip(".")
    return f"${text or '0'}"


def usd4(amount: float) -> str:
    """A measured amount (spent, remaining), always 4 dp: ``$12.3400``."""
    return f"${round_usd(amount):.4f}"


def default_reserve(max_cost: float) -> float:
    """10% of ``max_cost``, rounded to 4 dp: the ``reserve_budget`` default."""
    return round_usd(max_cost * RESERVE_SHARE)


@dataclass(frozen=True)
class Caps:
    """The cost caps in force (USD; None = unset). ``reserve`` is resolved (0 when uncapped)."""

    max_cost: float | None = None
    max_iter_cost: float | None = None
    max_step_cost: float | None = None
    reserve: float = 0.0

    @property
    def armed(self) -> bool:
        """True when a run ceiling is set (every other cap requires one)."""
        return self.max_cost is not None


def caps_of(max_cost: float | None, max_iter_cost: float | None, max_step_cost: float | None,
            reserve_budget: float | None) -> Caps:
    """Caps from config values; a missing reserve is derived as 10% of ``max_cost``."""
    if max_cost is None:
        return Caps(None, max_iter_cost, max_step_cost, 0.0)
    reserve = default_reserve(max_cost) if reserve_budget is None else round_usd(reserve_budget)
    return Caps(max_cost, max_iter_cost, max_step_cost, reserve)


def enforced_caps(live: Caps, recorded: float | None) -> Caps:
    """The caps a run enforces: ``live`` (config.json now) with its ceiling held to at most
    ``recorded``, the ceiling the run's row keeps (USD; None: uncapped), set when the run
    began and by every retune through fractal's verbs. So a hand edit of config.json can
    lower the ceiling but never raise or clear it. A live reserve that no longer fits under
    the held ceiling (99% of it or more) falls back to the default 10%."""
    if recorded is None or (live.max_cost is not None and live.max_cost <= recorded):
        return live
    reserve = live.reserve if live.max_cost is not None and live.reserve < 0.99 * recorded \
        else default_reserve(recorded)
    return Caps(round_usd(recorded), live.max_iter_cost, live.max_step_cost, reserve)


def run_remaining(caps: Caps, run_spent: float) -> float | None:
    """``max_cost - run_spent`` clamped at 0 and rounded to 4 dp; None when uncapped."""
    if caps.max_cost is None:
        return None
    return max(0.0, round_usd(caps.max_cost - run_spent))


def step_budget(caps: Caps, run_spent: float, iter_spent: float) -> float | None:
    """The per-step budget in USD, or None when no cap applies.

    The minimum of: the run remaining minus the reserve (inside the reserve window, where
    that is <= 0, the full run remaining instead: wind-down steps may spend the reserve,
    never past the ceiling); the iteration's headroom ``max_iter_cost - iter_spent``
    (ignored once <= 0: the iteration is in reserve mode); and ``max_step_cost``. Rounded
    to 4 dp. A result <= 0 means the launch is skipped (``over budget``).
    """
    remaining = run_remaining(caps, run_spent)
    candidates: list[float] = []
    if remaining is not None:
        above_reserve = round_usd(remaining - caps.reserve)
        candidates.append(above_reserve if above_reserve > 0 else remaining)
    if caps.max_iter_cost is not None:
        headroom = round_usd(caps.max_iter_cost - iter_spent)
        if headroom > 0:
            candidates.append(headroom)
    if caps.max_step_cost is not None:
        candidates.append(caps.max_step_cost)
    return round_usd(min(candidates)) if candidates else None


def reserve_cause(caps: Caps, run_spent: float, iter_spent: float,
                  cascaded: bool) -> str | None:
    """Why the rest of this iteration runs in reserve mode, or None.

    First match: an ancestor's budget finish cascaded down (``cascaded``); the iteration's
    spend reached ``max_iter_cost``; the run's remaining budget drained into the reserve.
    """
    if cascaded:
        return "an ancestor's cost budget finish cascaded down"
    if caps.max_iter_cost is not None and round_usd(iter_spent) >= caps.max_iter_cost:
        return (f"the iteration spent {usd4(iter_spent)} of its {usd(caps.max_iter_cost)} "
                "cap (max_iter_cost)")
    remaining = run_remaining(caps, run_spent)
    if remaining is not None and remaining <= caps.reserve:
        return (f"{usd4(remaining)} remains of {usd(caps.max_cost or 0)}, inside the "
                f"{usd(caps.reserve)} reserve")
    return None


def cost_budget_label(caps: Caps, run_spent: float, enforcing: bool) -> str:
    """``COST_BUDGET``: ``$87.6543 remaining of $100 (max $10/iter) (warn $1/step)``.

    The step cap reads ``max`` for an agent that enforces it in flight (``enforcing``),
    ``warn`` otherwise; ``no limit`` when no ``max_cost`` is set.
    """
    remaining = run_remaining(caps, run_spent)
    if remaining is None or caps.max_cost is None:
        return "no limit"
    label = f"{usd4(remaining)} remaining of {usd(caps.max_cost)}"
    if caps.max_iter_cost is not None:
        label += f" (max {usd(caps.max_iter_cost)}/iter)"
    if caps.max_step_cost is not None:
        label += f" ({'max' if enforcing else 'warn'} {usd(caps.max_step_cost)}/step)"
    return label


def ceiling_reason(caps: Caps, run_spent: float) -> str | None:
    """``subtree cost budget reached (spent $X >= $Y max)`` once spend reached ``max_cost``."""
    if caps.max_cost is None or round_usd(run_spent) < caps.max_cost:
        return None
    return f"{SUBTREE_STEM} (spent {usd4(run_spent)} >= {usd(caps.max_cost)} max)"


def boundary_reason(caps: Caps, run_spent: float) -> str | None:
    """Why the run ends at this iteration boundary, or None.

    Past the ceiling: the subtree reason; inside the reserve window:
    ``cost budget reserve reached (spent $X >= $Y max - $Z reserve)``.
    """
    over = ceiling_reason(caps, run_spent)
    if over is not None or caps.max_cost is None:
        return over
    if round_usd(run_spent) >= round_usd(caps.max_cost - caps.reserve):
        return (f"{RESERVE_STEM} (spent {usd4(run_spent)} >= {usd(caps.max_cost)} max - "
                f"{usd(caps.reserve)} reserve)")
    return None


def ancestor_reason(run_spent: float, finish_reason: str) -> str:
    """A cascaded budget landing, relabelled with this run's own figures:
    ``ancestor cost budget reached (spent $X by this run; via main.a)``."""
    match = _VIA.search(finish_reason)
    via = f"; via {match.group(1)}" if match else ""
    return f"{ANCESTOR_STEM} (spent {usd4(run_spent)} by this run{via})"


def is_budget_reason(reason: str) -> bool:
    """True when a finish reason has the shape of a budget abort (``<stem> (spent $...``).

    A deliberate finish's free text never does, so it cannot pose as a budget landing.
    """
    return _BUDGET_SHAPE.match(reason) is not None


@dataclass(frozen=True)
class Landing:
    """How the budget shapes a run's end: ``reason`` makes it a budget landing (``exited``
    with exit code 0); ``note`` is an overshoot to append to a completed run's reason."""

    reason: str | None
    note: str | None = None


def landing(*, own_reason: str | None, finish_reasons: Iterable[str], finished: bool,
            caps: Caps, run_spent: float) -> Landing:
    """Classify a run's end by budget; a budget end always lands ``exited`` with
    exit code 0.

    ``own_reason`` is the bound this run itself tripped; ``finish_reasons`` the metadata of
    its finish signals; ``finished`` whether a finish ended the run. A deliberate finish
    (any finish whose reason is not budget-shaped) wins: the run completes, and a spend past
    ``max_cost`` rides along as ``cost budget exceeded in finish wind-down (...)``.
    Otherwise the own reason, else a cascaded budget finish relabelled with this run's
    figures, makes it a budget landing.
    """
    reasons = list(finish_reasons)
    if finished and any(not is_budget_reason(r) for r in reasons):
        over = caps.max_cost is not None and round_usd(run_spent) >= caps.max_cost
        note = (f"{WINDDOWN_STEM} (spent {usd4(run_spent)} >= {usd(caps.max_cost or 0)} max)"
                if over else None)
        return Landing(None, note)
    if own_reason is not None:
        return Landing(own_reason)
    cascaded = [r for r in reasons if is_budget_reason(r)]
    if cascaded:
        return Landing(ancestor_reason(run_spent, cascaded[0]))
    return Landing(None)
