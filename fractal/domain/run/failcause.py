"""The cause beside a failed run's reason: the run's own reason says how it ended in the
seed's words (``Reached max iterations (2); final iteration failed``), and the reason of
its newest failed step says why (``agent error (exit 3): boom``). The inbox item and
``fractal node status`` show both (pure: strings in, a string out)."""

from __future__ import annotations

__all__ = ["CAUSE_MAX", "failure_cause"]

CAUSE_MAX = 120
"""Characters of the step's reason shown (clipped with ``...``)."""


def failure_cause(run_reason: str, step_name: str, step_reason: str) -> str:
    """``step EXECUTE failed: agent error (exit 3): boom`` for a run whose newest failed
    step is ``step_name`` with ``step_reason``; empty when there is no such step or the
    run's reason already holds that step's reason (``... (last: failed on PLAN: agent
    error ...)``)."""
    why = " ".join(step_reason.split())
    if not why or why in " ".join(run_reason.split()):
        return ""
    if len(why) > CAUSE_MAX:
        why = why[:CAUSE_MAX - 3].rstrip() + "..."
    return f"step {step_name} failed: {why}" if step_name else f"a step failed: {why}"
