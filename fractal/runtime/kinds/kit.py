"""The services the step kinds of one run share, built once per run by the iteration
runner: the launches (sessions, token usage, the backstop's early status), the usage
window (its probe and its end of the run), SYNC, and the approval gate. ``kind`` hands
out the run's one instance of a step kind, so a kind that runs another (a gate's fix
round is an agent step) shares that kind's per-run state.
"""

from __future__ import annotations

from typing import TypeVar

from fractal.runtime.approval import ApprovalGate
from fractal.runtime.context import LoopParts
from fractal.runtime.kinds.base import KindPart
from fractal.runtime.launches import Launches
from fractal.runtime.sync import Sync
from fractal.runtime.usagewait import UsageWait

__all__ = ["StepKit"]

_Kind = TypeVar("_Kind", bound=KindPart)


class StepKit:
    """One run's shared step services (see the module docstring). Every service, kind
    and agent-step wait is built with the run's ``LoopParts`` and this kit."""

    def __init__(self, parts: LoopParts) -> None:
        self.parts = parts
        self.launches = Launches(parts)
        self.usage = UsageWait(parts)
        self.sync = Sync(parts, self)  # each service takes what it needs from the kit
        self.approval = ApprovalGate(parts, self)
        self._kinds: dict[type[KindPart], KindPart] = {}

    def kind(self, row: type[_Kind]) -> _Kind:
        """The run's one instance of the step kind ``row`` (built on first use)."""
        made = self._kinds.get(row)
        if made is None:
            made = self._kinds[row] = row(self.parts, self)
        assert isinstance(made, row)
        return made
