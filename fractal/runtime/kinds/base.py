"""What every step kind shares: the plan of a step, the call the loop makes, the result a
kind hands back, and the ``StepKind`` protocol itself.

A kind never ends the iteration or the run by writing shared state: its ``StepResult``
says so (``stopped``/``finished`` for a stop or finish it took, ``ending`` for a run
that ends here, ``before`` for a wait that held the step back), and the iteration runner
turns that into the iteration's end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

from fractal.domain.run.outcome import RunEnd, StepOutcome
from fractal.domain.steps.files import StepFile
from fractal.domain.steps.frontmatter import Frontmatter
from fractal.domain.values import by_type

__all__ = ["OVER_BUDGET", "RunEnding", "StepCall", "StepKind", "StepPlan",
           "StepResult", "wait_ended"]

OVER_BUDGET = "over budget"
"""Reason of a launch skipped because the per-step budget is spent (booked ``stopped``,
exit 125, cost 0.0)."""


@dataclass(frozen=True)
class StepPlan:
    """A discovered step file, its parsed frontmatter, and the likely mistakes in that
    frontmatter (``frontmatter_warnings``; shown, never fatal)."""

    file: StepFile
    frontmatter: Frontmatter
    warnings: tuple[str, ...] = ()


@by_type
class RunEnding(NamedTuple):
    """A step kind ending the run: ``end`` is how the run closes (node and run status,
    exit code, reason); ``not_run`` is the reason the iteration's remaining steps are
    booked ``stopped`` with (``pool ended``; ignored when a wait ended the step)."""

    end: RunEnd
    not_run: str = ""


@dataclass(frozen=True)
class StepResult:
    """The final outcome of a step after retries; ``limit`` is the last effective limit (s);
    ``stopped`` marks a stop or finish that ended it cleanly (an approval wait), and
    ``finished`` tells the finish apart (the run then ends completed, not stopped).

    ``ending`` is set when the run ends with this step (a pool with nothing left, a usage
    window past ``max_usage_wait``); ``before`` names the row of a wait that held the step
    back and did not release (``WAIT``: the step itself never ran), ``during`` what the
    step was doing when a stop or finish took it (None: its approval wait); ``done`` that
    the node's own ``node done`` ended the wait (the run ends at the iteration's end)."""

    outcome: StepOutcome
    limit: float | None
    launched: bool
    stopped: bool = False
    finished: bool = False
    ending: RunEnding | None = None
    before: str | None = None
    during: str | None = None
    done: bool = False


def wait_ended(outcome: StepOutcome, ending: RunEnd | None, *, launched: bool) -> StepResult:
    """A wait's end (a usage window's) as the step's result: ``stopped``, ``finished`` when
    a finish ended it, and ``ending`` when the wait ended the run (``UsageWait.ending``)."""
    return StepResult(outcome, None, launched, stopped=True,
                      finished=outcome.reason.startswith("finish requested"),
                      ending=None if ending is None else RunEnding(ending))


@by_type
class StepCall(NamedTuple):
    """One step as the iteration hands it to its kind: the ``plan``, the node's task text
    (``node_md``) and whether it is the iteration's ``last`` step (the backstop follows)."""

    plan: StepPlan
    node_md: str
    last: bool


class StepKind(Protocol):
    """One kind of step. The iteration asks the kinds in the table's order (``KINDS``);
    the first that claims a step runs it, and a kind whose ``run`` returns None (a wait
    that released) passes the step on to the next row that claims it."""

    def claims(self, plan: StepPlan) -> bool:
        """True when this kind runs ``plan`` (read from its frontmatter alone)."""

    def syncs_before(self, plan: StepPlan) -> bool:
        """True when the SYNC pseudo-step runs before ``plan`` (a node with ``sync`` on)."""

    def run(self, call: StepCall) -> StepResult | None:
        """Run the step, book its rows, return how it ended (None: passed on). Raises Park
        on a pause, RunAbort when the node's checkout is gone."""
