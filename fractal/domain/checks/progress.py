"""The no-progress rule of the exit check (docs/checks.md, "The no-progress stop").

Each red exit check extends or restarts a *streak*: the same signature as the previous
red check extends it by one; a different signature restarts it at 1; so does the same
signature with fewer failing tests than last time (both counts known), because fewer
failures is progress even when the first failing line reads the same. A green check
ends the run, so it never reaches this rule. The run stops for no progress once the
streak reaches the ``no_progress`` config value (default 2: two red checks in a row
that fail the same way); ``None`` disables the stop.

A red check that printed nothing has no signature of its own, only its exit code
(``exit 1``): two such rounds cannot tell a file that grew from one that did not, so a
*silent* check never counts towards no progress. It ends any streak (the next check with
output starts at 1) and never stalls the run; the other limits (``max_iters``, the walls,
the cost caps) still bound it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_NO_PROGRESS", "Streak", "advance_streak", "is_silent", "is_stalled"]

DEFAULT_NO_PROGRESS = 2
"""Red exit checks in a row with one signature that end the run (config ``no_progress``)."""


@dataclass(frozen=True)
class Streak:
    """Consecutive red exit checks sharing ``signature``; ``failures`` is the latest count
    (None when unknown); ``count`` >= 1."""

    signature: str
    failures: int | None
    count: int


def is_silent(signature: str) -> bool:
    """True when a red check's ``signature`` holds nothing but its exit code: empty, or
    ``exit <N>`` (``signature.summarise`` gives that only when the output had no line)."""
    code = signature.removeprefix("exit ")
    return not signature or (code != signature and code.isdigit())


def advance_streak(streak: Streak | None, signature: str,
                   failures: int | None) -> Streak | None:
    """The streak after one more red check with ``signature`` and ``failures``.

    A silent check (``is_silent``) -> None: no streak, whatever came before. Otherwise
    ``streak`` None (no counted red check before it) starts a streak of 1. Same signature
    -> count + 1, unless both failure counts are known and the new one is smaller -> 1.
    A different signature -> 1.
    """
    if is_silent(signature):
        return None
    if streak is None or streak.signature != signature:
        return Streak(signature, failures, 1)
    fewer = failures is not None and streak.failures is not None and failures < streak.failures
    return Streak(signature, failures, 1 if fewer else streak.count + 1)


def is_stalled(streak: Streak | None, limit: int | None) -> bool:
    """True when ``streak`` has reached ``limit`` red checks (``limit`` None: never)."""
    return limit is not None and streak is not None and streak.count >= limit
