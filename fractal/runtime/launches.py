"""One agent launch of the loop, whatever asked for it (a step, a retry, a SYNC, a fix
round): check the checkout, price it under the cost caps (a spent per-step budget books
the launch ``stopped``/``over budget`` without starting anything), build it
(``stepbuild``), run it (``launch.run_attempt``), and keep the sessions and their token
usage for the next launches of the run.
"""

from __future__ import annotations

from collections.abc import Mapping

from fractal.agents.base import Usage
from fractal.domain.durations import parse_duration
from fractal.domain.errors import FractalError
from fractal.domain.outcome import EXIT_BUDGET_SKIP, Status, StepOutcome, clip_reason
from fractal.domain.steps import StepFile
from fractal.domain.walls import effective_step_limit
from fractal.runtime.context import check_checkout
from fractal.runtime.costing import LaunchBudget
from fractal.runtime.kinds.base import OVER_BUDGET
from fractal.runtime.launch import AttemptResult, LaunchKit, run_attempt
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.statusahead import StatusAhead
from fractal.runtime.stepbuild import StepBuilder, step_backend, step_route

__all__ = ["Launches"]


class Launches(LoopPart):
    """Starts the run's agent launches, one attempt (one step row) per call."""

    def __init__(self, parts: LoopParts) -> None:
        super().__init__(parts)
        # Token usage of each session so far, by session id: a CLI that reports cumulative
        # thread usage (codex) turns it into per-launch figures (LaunchRequest.prior_usage).
        self.session_usage: dict[str, Usage] = {}
        self.builder = StepBuilder(self.boot, self.state, self.ledger, self.session_usage,
                                   self.clock, spent=self.budget.run_spent)
        #: Armed by the agent step for the iteration's last step (the backstop follows it).
        self.ahead = StatusAhead(self.boot.paths.worktree, self.clock)
        self.kit = LaunchKit(self.ledger, self.reporter, self.waker, self.clock,
                             parts.launcher, self.ahead)

    def run(self, file: StepFile, body: str, fm: Mapping[str, str], node_md: str,
            limit: float | None, number: int, *, label: str, suffix: str,
            name: str | None = None, gated: bool = False,
            lenient: bool = False) -> AttemptResult:
        """Launch ``body`` as attempt ``number`` of ``file`` under ``fm`` within ``limit``
        (s; None: no wall). ``name`` overrides the row's step name (``SYNC``), ``gated``
        marks an approval gate's row, ``lenient`` a launch whose failure fails nothing.
        Raises RunAbort when the node's checkout is gone."""
        check_checkout(self.boot.paths)  # every launch (steps, retries, SYNC, fixers) passes here
        cost = self.launch_budget(fm)
        if cost is not None and (cost.refusal or cost.skip) and (limit is None or limit > 0):
            return self._not_launched(file, name or file.name, cost.refusal)
        launch = self.builder.build(file, body, fm, node_md, limit, retry_number=number,
                                    label=label, snapshot_suffix=suffix, name=name, gated=gated,
                                    should_pause=self.steering.pause_pending, lenient=lenient,
                                    budget=cost)
        result = run_attempt(launch.attempt, self.kit, launch.env_for)
        self.budget.after_launch(launch.attempt.backend, name or file.name, result.cost,
                                 result.launched)
        resume = launch.attempt.request.resume
        # A minted id counts only once the agent echoed it: a CLI that died before
        # starting the session cannot be resumed into it.
        session = result.session or resume
        if session and result.usage is not None:
            before = launch.prior if session == resume and launch.prior is not None else (0, 0, 0)
            self.session_usage[session] = (before[0] + result.usage[0],
                                           before[1] + result.usage[1],
                                           before[2] + result.usage[2])
        if session and not launch.detached and result.launched:
            self.state.sessions[launch.session_key] = session
            if launch.session_key == self.boot.agent_setting and self.state.iter_id is not None:
                self.ledger.set_iteration_session(self.state.iter_id, session)
        return result

    def launch_budget(self, fm: Mapping[str, str]) -> LaunchBudget | None:
        """The cost side of a launch under ``fm`` (None when its agent override is invalid:
        building the launch reports that)."""
        try:
            backend = step_backend(self.boot, fm)
            provider = step_route(self.boot, backend, fm)
        except FractalError:
            return None
        return self.budget.launch(backend, fm.get("model") or self.state.live.model, provider)

    def _not_launched(self, file: StepFile, name: str, refusal: str | None) -> AttemptResult:
        """Book a launch that never happens: a cost cap that cannot be tracked (failed, exit
        1) or a spent budget (``stopped``, exit 125, ``over budget``); cost 0.0 either way."""
        if refusal is not None:
            outcome = StepOutcome(Status.FAILED, 1, clip_reason(refusal))
        else:
            outcome = StepOutcome(Status.STOPPED, EXIT_BUDGET_SKIP, OVER_BUDGET)
        step_id = self.ledger.book_closed_step(
            node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
            step=file.position, step_name=name, status=outcome.status.value,
            exit_code=outcome.exit_code, reason=outcome.reason, cost=0.0)
        return AttemptResult(step_id, outcome, None, 0.0, None, 0.0, False)

    def limit(self, fm: Mapping[str, str]) -> float | None:
        """The wall of a launch under ``fm`` (s): its ``timeout:`` (a malformed one warns
        and keeps the node's ``step_timeout``), bounded by the run and iteration walls."""
        step_timeout = self.state.live.step_timeout
        if "timeout" in fm:
            try:
                step_timeout = parse_duration(fm["timeout"], "timeout")
            except FractalError as exc:
                self.reporter.warning(f"{exc}; using the node's step_timeout instead")
        return effective_step_limit(self.clock.monotonic(), self.state.run_deadline,
                                    self.state.iter_deadline, step_timeout)

    def wall(self) -> float | None:
        """The nearer run or iteration deadline (clock s), moved by usage-wait credits."""
        return min([d for d in (self.state.run_deadline, self.state.iter_deadline)
                    if d is not None], default=None)
