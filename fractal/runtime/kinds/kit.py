"""The services the step kinds of one run share, built once per run by the iteration
runner: the launches (sessions, token usage, the backstop's early status), the usage
window (its probe and its end of the run), SYNC, and the approval gate. ``kind`` hands
out the run's one instance of a step kind, so a kind that runs another (a gate's fix
round is an agent step) shares that kind's per-run state.
"""

from __future__ import annotations

from typing import TypeVar

from fractal.domain.outcome import StepOutcome
from fractal.domain.steps import banner_verdict
from fractal.runtime.approval import ApprovalGate
from fractal.runtime.kinds.base import StepCall, StepPlan, StepResult
from fractal.runtime.launches import Launches
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.outagewait import OutageWait
from fractal.runtime.sync import Sync
from fractal.runtime.usagewait import UsageWait

__all__ = ["KindPart", "StepKit"]



class KindPart(LoopPart):
    """Base of the step kinds (a ``StepKind`` each): the run's loop wiring plus the
    services the kinds share (``StepKit``: launches, usage windows, SYNC, approval
    gates). A kind is built once per run (``StepKit.kind``)."""

    def __init__(self, parts: LoopParts, kit: StepKit) -> None:
        super().__init__(parts)
        self.kit = kit

    def claims(self, plan: StepPlan) -> bool:
        """See ``StepKind.claims``."""
        raise NotImplementedError

    def syncs_before(self, plan: StepPlan) -> bool:
        """See ``StepKind.syncs_before``."""
        raise NotImplementedError

    def run(self, call: StepCall) -> StepResult | None:
        """See ``StepKind.run``."""
        raise NotImplementedError

    def close_banner(self, banner: str, outcome: StepOutcome, limit: float | None,
                     started: float) -> None:
        """Close ``banner`` with the verdict of ``outcome`` under ``limit`` (s), timed from
        ``started`` (clock s)."""
        self.reporter.banner_close(banner, banner_verdict(outcome, limit),
                                   self.clock.monotonic() - started)


_Kind = TypeVar("_Kind", bound=KindPart)


class StepKit:
    """One run's shared step services (see the module docstring). Every service, kind
    and agent-step wait is built with the run's ``LoopParts`` and this kit."""

    def __init__(self, parts: LoopParts) -> None:
        self.parts = parts
        self.launches = Launches(parts)
        self.usage = UsageWait(parts)
        self.outage = OutageWait(parts)
        self.sync = Sync(parts, self.launches, self.usage, self.outage)
        self.approval = ApprovalGate(parts, self.launches, self.sync, self.usage)
        self._kinds: dict[type[KindPart], KindPart] = {}

    def kind(self, row: type[_Kind]) -> _Kind:
        """The run's one instance of the step kind ``row`` (built on first use)."""
        made = self._kinds.get(row)
        if made is None:
            made = self._kinds[row] = row(self.parts, self)
        assert isinstance(made, row)
        return made
