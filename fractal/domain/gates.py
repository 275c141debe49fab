"""The approval gates a run holds: the steps gated when it started stay gated for the
whole run, whatever the step files say later (docs/security.md). A run records them as
its ``gates`` event; a merge without ``--force`` refuses a child whose last run left one
of them without an approval. Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["GATES_EVENT", "gates_note", "gates_of", "unapproved_gate"]

GATES_EVENT = "gates"
"""The event a run records at its start naming its gated steps (metadata: ``gates_note``)."""


def gates_note(names: Sequence[str]) -> str:
    """The ``gates`` event's metadata: the step names, comma-separated (``PLAN, EXECUTE``)."""
    return ", ".join(names)


def gates_of(note: str) -> tuple[str, ...]:
    """The step names of a ``gates`` event's metadata (``gates_note`` read back)."""
    return tuple(name.strip() for name in note.split(",") if name.strip())


def unapproved_gate(gates: Sequence[str], approved: Collection[str]) -> str | None:
    """The first of a run's ``gates`` (the steps gated when it started) with no approved row
    in the run (``approved``: the names of its approved steps), or None."""
    return next((name for name in gates if name not in approved), None)
