"""Pure wording of how a run's end relates to its subtree: descendants left running,
approval gates a finish ended before anyone approved them, and hand-backs the node has
not merged again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["FINISHED", "Unsettled", "never_approved", "not_merged", "unsettled_notice"]

FINISHED = "Finished by request"
"""The reason of a run a finish ended (the terminal cascade's wording)."""


@dataclass(frozen=True)
class Unsettled:
    """A descendant still running when its ancestor's run ended: its branch, its status
    (``active`` or ``paused``) and whether it waits at an approval gate."""

    branch: str
    status: str
    awaiting_approval: bool = False

    @property
    def label(self) -> str:
        return f"{self.branch} {'awaiting approval' if self.awaiting_approval else self.status}"


def unsettled_notice(children: Sequence[Unsettled]) -> str | None:
    """``ended with 2 children still running: main.a.b awaiting approval, main.a.c active``
    for the descendants left running (sorted by branch), or None when there is none."""
    if not children:
        return None
    noun = "child" if len(children) == 1 else "children"
    labels = ", ".join(c.label for c in sorted(children, key=lambda c: c.branch))
    return f"ended with {len(children)} {noun} still running: {labels}"


def never_approved(reason: str, gates: Sequence[str]) -> str:
    """A finish's reason naming the gated steps it ended while they awaited approval:
    ``Finished by request; EXECUTE never approved``. Any other reason, or no gate, is
    returned unchanged. ``gates`` are step names, each named once, in order."""
    if not gates or not reason.startswith(FINISHED):
        return reason
    names = list(dict.fromkeys(gates))
    return f"{reason}; {', '.join(names)} never approved"


def not_merged(reason: str, children: Sequence[str]) -> str:
    """A run's end reason naming the children whose hand-back the node has not merged
    again: ``Timed out at iteration 3.1 (...); hand-back of main.lead.wc not merged``
    (``hand-backs of a, b not merged`` for several). No child: ``reason`` unchanged."""
    if not children:
        return reason
    noun = "hand-back" if len(children) == 1 else "hand-backs"
    return f"{reason}; {noun} of {', '.join(children)} not merged"
