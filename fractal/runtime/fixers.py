"""The fixer side of a gate's check-and-fix cycle (``on_fail: fix``): each round runs the
gate's fixer prompt as one agent launch, with its own step row, under the per-step
budget and the step wall like any step, and its prompt sees the red check as the
``CHECK_*`` variables. Between rounds a pause parks the run, a stop or a spent budget
ends the cycle.

The fixer prompt is a file relative to the node directory and outside ``steps/``, so the
loop never runs it as a step of its own; ``requires_approval:`` and ``check:`` in its
frontmatter are ignored (a fix round is neither a gate nor an approval gate).
"""

from __future__ import annotations

from types import MappingProxyType

from fractal.domain.frontmatter import Frontmatter, parse_frontmatter
from fractal.domain.outcome import Status, StepOutcome
from fractal.domain.signals import Signal
from fractal.domain.steps import StepFile
from fractal.runtime.steering import Park
from fractal.runtime.steprunner import OVER_BUDGET, StepPlan, StepResult, StepRunner

__all__ = ["FixerRunner", "fixer_plan"]

_IGNORED = ("requires_approval", "check", "on_fail")


def fixer_plan(gate: StepPlan, text: str, round_no: int, rounds: int) -> StepPlan:
    """The step plan of fix round ``round_no`` of ``rounds`` for ``gate``: the fixer
    prompt ``text`` at the gate's position, named ``<GATE> fix round 2 of 3``."""
    parsed = parse_frontmatter(text)
    fields = {k: v for k, v in parsed.fields.items() if k not in _IGNORED}
    file = gate.file
    step = StepFile(filename=file.filename, prefix=file.prefix,
                    name=f"{file.name} fix round {round_no} of {rounds}",
                    position=file.position, total=file.total)
    return StepPlan(step, Frontmatter(MappingProxyType(fields), parsed.body, parsed.has_block))


class FixerRunner:
    """Runs fix rounds through the iteration's ``StepRunner`` (the ``GateFixer`` of
    ``runtime.checks``)."""

    def __init__(self, steps: StepRunner, node_md: str) -> None:
        self.steps = steps
        self.node_md = node_md

    def launch(self, gate: StepPlan, fixer: str, round_no: int, rounds: int) -> StepResult | None:
        """Run one fix round; None (warned) when the prompt file cannot be read."""
        path = self.steps.boot.paths.node_dir / fixer
        try:
            if not path.is_file():
                raise OSError("not a regular file")
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            self.steps.reporter.warning(f"{gate.file.name}: fixer {fixer} cannot be read "
                                        f"({exc}); no fix round runs")
            return None
        return self.steps.run_step(fixer_plan(gate, text, round_no, rounds), self.node_md)

    def between_rounds(self) -> StepResult | None:
        """Raises Park on a pending pause; a stop ends the cycle (stopped), a crossed cost
        ceiling too (``over budget``); None: the next round may run."""
        signal = self.steps.steering.check(allow_finish=False)
        if signal is Signal.PAUSE:
            raise Park("during a fix cycle")
        if signal is Signal.STOP:
            return StepResult(StepOutcome(Status.STOPPED, 0, "stopped"), None, True,
                              stopped=True)
        if self.steps.budget.ceiling_crossed():
            return StepResult(StepOutcome(Status.STOPPED, 0, OVER_BUDGET), None, True)
        return None
