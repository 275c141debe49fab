"""The check gate: a step file whose frontmatter has ``check: <command>`` runs that
command instead of an agent (``runtime.checks`` runs and books it). It books a step row
like any other and is never retried; ``on_fail: continue`` (the default) lets the
iteration go on after a red gate, ``on_fail: stop-iteration`` fails the iteration there,
and ``on_fail: fix`` runs the bounded fix cycle before the gate's ``on_fail_final``
decides. Gates run in file order, so the first gate that stays red with stop-iteration
ends the iteration.

The fix cycle: each round runs the gate's fixer prompt as one agent step (the run's
``AgentStep``, with its own row, under the per-step budget and the step wall like any
step; its prompt sees the red check as the ``CHECK_*`` variables), then the check again,
at most ``rounds`` times, until the gate passes. Between rounds a pause parks the run, a
stop or a spent budget ends the cycle. The fixer prompt is a file relative to the node
directory and outside ``steps/``, so the loop never runs it as a step of its own;
``requires_approval:``, ``check:`` and ``on_fail:`` in its frontmatter are ignored (a fix
round is neither a gate nor an approval gate).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from fractal.domain.checks import (
    CheckKind,
    CheckResult,
    FixPlan,
    OnFail,
    gate_command,
    gate_fix_plan,
    gate_on_fail,
    gate_pass_score,
)
from fractal.domain.durations import parse_duration
from fractal.domain.frontmatter import Frontmatter, parse_frontmatter
from fractal.domain.outcome import EXIT_TIMEOUT, Status, StepOutcome
from fractal.domain.signals import Signal
from fractal.domain.steps import StepFile, banner_label
from fractal.domain.walls import effective_step_limit
from fractal.errors import FractalError
from fractal.runtime.checks import CheckRequest, CheckRunner, outcome_text
from fractal.runtime.kinds.agent import AgentStep
from fractal.runtime.kinds.base import OVER_BUDGET, StepCall, StepPlan, StepResult
from fractal.runtime.kinds.kit import KindPart, StepKit
from fractal.runtime.loopparts import LoopParts
from fractal.runtime.steering import Park

__all__ = ["CheckGate", "GateCheck", "fixer_plan"]

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


@dataclass(frozen=True)
class GateCheck:
    """One run of a gate's command: its ``result`` (None when the walls left no time),
    the ``outcome`` its step row closed with, and the ``limit`` it ran under (s)."""

    result: CheckResult | None
    outcome: StepOutcome
    limit: float | None


class CheckGate(KindPart):
    """Runs gate steps and their fix cycles. Raises Park on a pause."""

    def __init__(self, parts: LoopParts, kit: StepKit) -> None:
        super().__init__(parts, kit)
        self.checks = CheckRunner(parts)

    def claims(self, plan: StepPlan) -> bool:
        """Steps whose frontmatter has a non-empty ``check:``."""
        return gate_command(plan.frontmatter.fields) is not None

    def syncs_before(self, plan: StepPlan) -> bool:
        """No SYNC: no agent runs the check (a fix round is not preceded by one either)."""
        return False

    def run(self, call: StepCall) -> StepResult:
        """Run the gate (``check``) and say whether the iteration goes on.

        Returns a completed StepResult when it may (a pass, or ``on_fail: continue``), the
        failed outcome for ``on_fail: stop-iteration``, and a timed-out one (exit 124,
        nothing run) when the walls left no time. ``on_fail: fix`` runs the fix cycle.
        """
        plan = call.plan
        fields = dict(plan.frontmatter.fields)
        try:
            on_fail = gate_on_fail(fields)
        except FractalError as exc:
            self.reporter.warning(str(exc))
            on_fail = OnFail.CONTINUE
        fix: FixPlan | None = None
        if on_fail is OnFail.FIX:
            try:
                fix = gate_fix_plan(fields)
            except FractalError as exc:
                self.reporter.warning(f"{exc}; the gate stops the iteration when it fails")
            on_fail = OnFail.STOP_ITERATION if fix is None else fix.final
        first = self.check(plan)
        if first.result is None:
            return StepResult(first.outcome, first.limit, False)
        last, rounds = first, 0
        if not first.result.passed and fix is not None:
            ended, last, rounds = self._fix_cycle(call, fix, first)
            if ended is not None:
                return ended
        if last.result is None:
            return StepResult(last.outcome, last.limit, False)
        if last.result.passed or on_fail is OnFail.CONTINUE:
            return StepResult(StepOutcome(Status.COMPLETED, 0, ""), last.limit, True)
        if rounds:
            reason = (f"{last.outcome.reason.split(' after ')[0]} after {rounds} fix "
                      f"round{'s' if rounds > 1 else ''}")
            return StepResult(StepOutcome(Status.FAILED, last.outcome.exit_code, reason),
                              last.limit, True)
        return StepResult(last.outcome, last.limit, True)

    def check(self, plan: StepPlan, *, after: str = "", log_suffix: str = "") -> GateCheck:
        """Run the gate command of ``plan`` once and book its step row (cost 0.0):
        ``completed``/0 when it passed, else ``failed``/N ``check failed (exit N)``;
        ``after`` (``fix round 2 of 3``) joins the reason of a re-check, ``log_suffix`` its
        log name. A check that exited 0 below its ``pass_score`` is ``failed``/1 ``check
        failed (score 0.6 below pass_score 0.8)``. The result becomes the run's newest
        check. Walls with no time left: ``exited``/124."""
        boot, state, ledger, reporter = self.boot, self.state, self.ledger, self.reporter
        fields = dict(plan.frontmatter.fields)
        command = gate_command(fields)
        assert command is not None, "CheckGate.check called on an agent step"
        try:
            needed = gate_pass_score(fields, None)
        except FractalError as exc:
            reporter.warning(f"{exc}; the exit code alone decides")
            needed = None
        banner = banner_label(plan.file)
        reporter.banner_open(f"{banner}: check {command}" + (f" (after {after})" if after else ""))
        node, position = boot.paths.branch, plan.file.position
        limit = self._limit(fields)
        if limit is not None and limit <= 0:
            return GateCheck(None, self._no_time(plan, banner), limit)
        step_id = ledger.open_step(node=node, run_id=state.run_id, iter_id=state.iter_id,
                                   step=position, step_name=plan.file.name, agent=None,
                                   model=None, session=None)
        log_path = (boot.paths.tmp_dir / "checks"
                    / f"{state.run_id}-{state.iteration}-{position}{log_suffix}.log")
        result = self.checks.run(CheckRequest(CheckKind.GATE, command, limit, log_path, step_id,
                                              needed))
        state.checks = state.checks.after_gate(result)
        tail = f" after {after}" if after else ""
        if result.passed:
            outcome = StepOutcome(Status.COMPLETED, 0, f"passed{tail}" if after else "")
        elif result.exit_code == 0:  # exit 0 below its pass_score: a failure at exit 1
            outcome = StepOutcome(Status.FAILED, 1,
                                  f"check failed ({result.summary.signature}){tail}")
        else:
            outcome = StepOutcome(Status.FAILED, result.exit_code,
                                  f"check failed (exit {result.exit_code}){tail}")
        ledger.close_step(step_id, outcome.status.value, outcome.exit_code, outcome.reason,
                          cost=0.0)
        reporter.banner_close(banner, outcome_text(result), result.seconds)
        return GateCheck(result, outcome, limit)

    def _fix_cycle(self, call: StepCall, fix: FixPlan,
                   first: GateCheck) -> tuple[StepResult | None, GateCheck, int]:
        """Fixer, re-check, at most ``fix.rounds`` times after the red ``first`` check,
        until the gate passes. Returns (the StepResult that ends the step early: a fixer
        over budget or whose usage-window wait ended the run, a stop between rounds; else
        None), the newest GateCheck (a re-check with no time left has no result) and the
        number of re-checks that ran."""
        plan, last = call.plan, first
        for round_no in range(1, fix.rounds + 1):
            label = f"fix round {round_no} of {fix.rounds}"
            if round_no > 1:
                ended = self._between_rounds()
                if ended is not None:
                    return ended, last, round_no - 1
            self.reporter.notice(f"{plan.file.name} failed: {label} ({fix.fixer})")
            fixed = self._fix_round(call, fix.fixer, round_no, fix.rounds)
            if fixed is None:
                return None, last, round_no - 1
            if fixed.outcome.reason == OVER_BUDGET or fixed.ending is not None:
                return fixed, last, round_no - 1  # a spent budget, a run a usage wait ended
            last = self.check(plan, after=label, log_suffix=f"-fix{round_no}")
            if last.result is None or last.result.passed:
                return None, last, round_no
        return None, last, fix.rounds

    def _fix_round(self, call: StepCall, fixer: str, round_no: int,
                   rounds: int) -> StepResult | None:
        """Run fix round ``round_no`` of ``rounds``: the prompt file ``fixer`` (relative to
        the node directory) as one agent step with its own row; None (warned) when the
        prompt cannot be read (the cycle ends there)."""
        gate = call.plan
        path = self.boot.paths.node_dir / fixer
        try:
            if not path.is_file():
                raise OSError("not a regular file")
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            self.reporter.warning(f"{gate.file.name}: fixer {fixer} cannot be read "
                                  f"({exc}); no fix round runs")
            return None
        agent = self.kit.kind(AgentStep)
        return agent.run_step(fixer_plan(gate, text, round_no, rounds), call.node_md)

    def _between_rounds(self) -> StepResult | None:
        """Raises Park on a pending pause; a stop ends the cycle (stopped), a crossed cost
        ceiling too (``over budget``); None: the next round may run."""
        signal = self.steering.check(allow_finish=False)
        if signal is Signal.PAUSE:
            raise Park("during a fix cycle")
        if signal is Signal.STOP:
            return StepResult(StepOutcome(Status.STOPPED, 0, "stopped"), None, True,
                              stopped=True)
        if self.budget.ceiling_crossed():
            return StepResult(StepOutcome(Status.STOPPED, 0, OVER_BUDGET), None, True)
        return None

    def _limit(self, fields: dict[str, str]) -> float | None:
        """The gate's limit: its ``timeout:`` frontmatter, else ``check_timeout``, bounded by
        the run and iteration walls (a malformed ``timeout:`` warns and falls back)."""
        state = self.state
        seconds: int | None = state.live.check_timeout
        if "timeout" in fields:
            try:
                seconds = parse_duration(fields["timeout"], "timeout")
            except FractalError as exc:
                self.reporter.warning(f"{exc}; using check_timeout instead")
        return effective_step_limit(self.clock.monotonic(), state.run_deadline,
                                    state.iter_deadline, seconds)

    def _no_time(self, plan: StepPlan, banner: str) -> StepOutcome:
        """The walls left a gate no time: book it ``exited``/124 ``timed out`` (cost 0.0),
        nothing run."""
        state = self.state
        self.ledger.book_closed_step(node=self.boot.paths.branch, run_id=state.run_id,
                                     iter_id=state.iter_id, step=plan.file.position,
                                     step_name=plan.file.name, status=Status.EXITED.value,
                                     exit_code=EXIT_TIMEOUT, reason="timed out", cost=0.0)
        self.reporter.banner_close(banner, f"timed out (exit {EXIT_TIMEOUT}, limit 0s)", 0.0)
        return StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out")
