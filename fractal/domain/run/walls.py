"""Time walls: deadlines, the effective step limit, pacing and the ``TIME_BUDGET`` label.

The user-facing rules are in docs/loop.md ("Time walls") and docs/configuration.md
("Loop and pacing"). All instants are float seconds on one clock
that the caller reads and passes in; durations are whole seconds (``int``) as parsed from
config. Nothing here reads a clock.
"""

from __future__ import annotations

from fractal.domain.durations import format_duration

__all__ = [
    "effective_step_limit",
    "iteration_deadline",
    "pacing_delay",
    "time_budget_label",
]


def iteration_deadline(started: float, iter_timeout: int | None,
                       interval: int | None) -> float | None:
    """The instant an iteration that began at ``started`` must end, or None for no wall.

    ``iter_timeout`` when set; otherwise ``interval`` doubles as the deadline;
    otherwise None. Seconds in, instant (same clock as ``started``) out.
    """
    span = iter_timeout if iter_timeout is not None else interval
    return None if span is None else started + span


def effective_step_limit(now: float, run_deadline: float | None, iter_deadline: float | None,
                         step_timeout: int | None) -> float | None:
    """Seconds a step launched at ``now`` may run, or None when nothing bounds it.

    The minimum of the time left on the run wall, the time left on the iteration wall and
    the step timeout (the frontmatter ``timeout:`` when present, else ``step_timeout``; the
    caller picks). The result may be <= 0: a deadline already passed, so the step is
    recorded timed out and nothing is spawned (docs/loop.md, "Time walls").
    """
    limits: list[float] = [deadline - now for deadline in (run_deadline, iter_deadline)
                           if deadline is not None]
    if step_timeout is not None:
        limits.append(float(step_timeout))
    return min(limits) if limits else None


def pacing_delay(now: float, iter_started: float, interval: int | None, sleep: int | None,
                 run_deadline: float | None) -> float:
    """Seconds to sleep before the next iteration.

    With ``interval``: what remains of it since ``iter_started`` (the next iteration starts
    ``interval`` after the previous one began). Else with ``sleep``: that fixed gap. Else 0.
    Never past ``run_deadline`` and never negative. (``interval`` and ``sleep`` are mutually
    exclusive in config; if both arrive, ``interval`` wins.)
    """
    if interval is not None:
        delay = interval - (now - iter_started)
    elif sleep is not None:
        delay = float(sleep)
    else:
        delay = 0.0
    if run_deadline is not None:
        delay = min(delay, run_deadline - now)
    return max(0.0, delay)


def time_budget_label(timeout: int | None, iter_timeout: int | None,
                      step_timeout: int | None) -> str:
    """The ``TIME_BUDGET`` prompt variable: ``24h total, 1h/iter, 10m/step`` or ``no limit``.

    Only the walls that are set appear, in that order; each is rendered by
    ``format_duration`` (seconds in).
    """
    parts = [f"{format_duration(seconds)}{suffix}" for seconds, suffix in (
        (timeout, " total"), (iter_timeout, "/iter"), (step_timeout, "/step"))
        if seconds is not None]
    return ", ".join(parts) if parts else "no limit"
