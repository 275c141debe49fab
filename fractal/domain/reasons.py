"""The words and numbers a recorded ending carries: reason texts, exit codes, the cap.

Kept apart from ``fractal.domain.outcome`` (which re-exports them) so that the read and
steering commands, which only clip and compare reasons, never define the run-end value
classes. Pure: no I/O, no clock.
"""

from __future__ import annotations

__all__ = [
    "ABNORMAL_EXIT",
    "AWAITING_APPROVAL",
    "DONE",
    "EXIT_BUDGET_SKIP",
    "EXIT_CANNOT_EXEC",
    "EXIT_TIMEOUT",
    "REASON_LIMIT",
    "clip_reason",
    "done_reason",
    "exit_code_from_returncode",
    "retry_reason",
    "signal_exit_code",
    "unpriced_reason",
    "without_retry",
]


AWAITING_APPROVAL = "awaiting approval"
"""The reason of a gate's step row while its approval wait holds it open, and the start of
the reason it keeps when that wait is parked (``awaiting approval; interrupted: SIGHUP``):
a resume then waits at the gate again instead of rerunning its agent."""

DONE = "Done"
"""How the reason of a run its own node ended begins (``fractal node done``): ``Done`` alone,
or ``Done: <the node's reason>``."""

ABNORMAL_EXIT = "Loop exited abnormally"
"""The reason on rows a loop left open when it ended without closing them: stamped by the
loop's own exit path, by a crash heal, and on stranded rows when the next run opens."""

EXIT_TIMEOUT = 124
"""Exit code recorded when the step hit its time limit (what ``timeout`` returns)."""
EXIT_BUDGET_SKIP = 125
"""Exit code recorded when the step was skipped for budget and never launched."""
EXIT_CANNOT_EXEC = 127
"""Exit code recorded when the agent binary could not be executed."""
REASON_LIMIT = 250
"""Recorded reasons are collapsed to one line and capped at this many characters."""


def signal_exit_code(signum: int) -> int:
    """The shell-style exit code of a death by signal ``signum``: ``128 + signum``."""
    return 128 + signum


def exit_code_from_returncode(rc: int) -> int:
    """Map a ``Popen.returncode`` to a recorded exit code: ``-N`` (killed by signal N) -> 128+N."""
    return signal_exit_code(-rc) if rc < 0 else rc


def clip_reason(text: str, limit: int = REASON_LIMIT) -> str:
    """Collapse every whitespace run (newlines too) to one space, strip, cap at ``limit`` chars.

    A cut reason ends with ``…`` and is still at most ``limit`` characters long.
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    if limit <= 0:
        return ""
    return flat[:limit - 1].rstrip() + "…"


def done_reason(reason: str) -> str:
    """The reason of a run its node ended with ``fractal node done [--reason R]``: ``Done``
    when ``reason`` is blank, else ``Done: <reason>`` (clipped to REASON_LIMIT)."""
    text = " ".join(reason.split())
    return clip_reason(f"{DONE}: {text}") if text else DONE


def retry_reason(reason: str) -> str:
    """Mark a retry attempt's reason: ``<reason>; retry``, or ``retry`` when empty.

    The reason is clipped first so the marker always survives the 250-character cap.
    """
    suffix = "; retry"
    if not reason.strip():
        return "retry"
    return clip_reason(reason, REASON_LIMIT - len(suffix)) + suffix


def without_retry(reason: str) -> str:
    """``reason`` without the ``retry`` marker ``retry_reason`` adds (``<reason>; retry``
    -> ``<reason>``, ``retry`` -> ``""``; a later marker stays: ``x; retry; unpriced`` ->
    ``x; unpriced``): what the attempt failed of, for a reason about the whole iteration."""
    return "; ".join(part for part in reason.split("; ") if part != "retry")


def unpriced_reason(reason: str) -> str:
    """Append ``; unpriced`` (a step that ended abnormally after opening a session and
    recorded no cost may have spent money nobody saw), within the 250-character cap."""
    suffix = "; unpriced"
    return clip_reason(reason, REASON_LIMIT - len(suffix)) + suffix if reason else \
        suffix.lstrip("; ")
