"""Pure rules of the ``wait: children`` step frontmatter: which children hold the loop
before such a step, and the wording of the wait (its step row, the pane, ``node status``).

A child holds the wait while its status is live (``active``, ``paused`` or ``idle``); a
settled or retired child (or one gone ``missing``) does not. Only the node's direct
children count: a grandchild is its own parent's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fractal.domain.states import UNSETTLED, Status

__all__ = [
    "STEP_WALL_NOTE",
    "WAIT_STEP",
    "WaitingChild",
    "children_waited",
    "wait_reason",
    "waiting_detail",
    "waits_for_children",
]

WAIT_STEP = "WAIT"
"""The ``step_name`` of a wait's own step row (``step``: the position of the step it
precedes). Like SYNC rows, it never counts as the step's work."""


STEP_WALL_NOTE = "does not bound the children wait; the run and iteration walls do"
"""What the dashboard's card says beside ``step_timeout`` while the node waits for its
children: the wait is its own row, held only by the run's and the iteration's walls."""


@dataclass(frozen=True)
class WaitingChild:
    """A live child the wait holds for: its branch, status, whether one of its steps
    awaits approval, whether it is idle and never ran (nothing but a command starts it),
    and whether a merge of it was handed back to it to resolve."""

    branch: str
    status: Status
    gate_pending: bool = False
    never_started: bool = False
    handed_back: bool = False

    @property
    def state(self) -> str:
        """What holds the child, first match: ``awaiting approval`` (at a gate),
        ``handed back`` (resolving a merge handed back to it), ``idle, never started``,
        else its status (``active``, ``paused``, ``idle``)."""
        if self.gate_pending:
            return "awaiting approval"
        if self.handed_back:
            return f"{self.status.value}, merge handed back"
        if self.never_started and self.status is Status.IDLE:
            return "idle, never started"
        return self.status.value

    @property
    def label(self) -> str:
        """``div awaiting approval`` / ``div active``: the last dotted segment and state."""
        return f"{self.branch.rsplit('.', 1)[-1]} {self.state}"


def waits_for_children(fields: Mapping[str, str]) -> bool:
    """True when the step frontmatter holds ``wait: children`` (case-insensitive)."""
    return fields.get("wait", "").strip().lower() == "children"


def children_waited(parent: str, nodes: Sequence[tuple[str, Status]]) -> list[str]:
    """The direct children of ``parent`` among ``nodes`` (branch, status) still live,
    sorted by branch."""
    prefix = parent + "."
    return sorted(branch for branch, status in nodes
                  if branch.startswith(prefix) and "." not in branch[len(prefix):]
                  and status in UNSETTLED)


def _count(n: int) -> str:
    return f"{n} {'child' if n == 1 else 'children'}"


def _span(seconds: float) -> str:
    """``45s`` under a minute, else whole minutes rounded (``5m``)."""
    whole = max(0, int(seconds))
    return f"{whole}s" if whole < 60 else f"{round(whole / 60)}m"


def wait_reason(children: int, seconds: float) -> str:
    """The reason of a wait that ended released: ``waited for 2 children (5m)``."""
    return f"waited for {_count(children)} ({_span(seconds)})"


def waiting_detail(children: Sequence[WaitingChild]) -> str:
    """``waiting for 2 children: div awaiting approval, ops active`` (sorted by branch)."""
    shown = ", ".join(c.label for c in sorted(children, key=lambda c: c.branch))
    return f"waiting for {_count(len(children))}: {shown}" if shown else "waiting for children"
