"""Run one step of an iteration: build its prompt and environment, launch it through
``launch.run_attempt``, and retry a failed launch (seed: "What the agent sees each
step", "Retries and backoff", "Continuous and detached modes", "The SYNC step").
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace

from fractal.agents.base import (
    Backend,
    LaunchRequest,
    Usage,
    binary_available,
    resolve_backend,
    resolve_route,
)
from fractal.assets import mode_text
from fractal.domain.durations import parse_duration
from fractal.domain.errors import FractalError
from fractal.domain.frontmatter import Frontmatter, is_true
from fractal.domain.outcome import EXIT_CANNOT_EXEC, Status, StepOutcome, clip_reason
from fractal.domain.render import assemble_prompt, iter_label, iter_ref, render
from fractal.domain.steps import StepFile, banner_label, step_label
from fractal.domain.variables import StepFacts, agent_environment, prompt_variables
from fractal.domain.walls import effective_step_limit, time_budget_label
from fractal.runtime.context import Boot, RunState, monotonic_to_epoch, static_facts
from fractal.runtime.launch import Attempt, AttemptResult, run_attempt
from fractal.runtime.pane import Reporter
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger

# Variables of the supervisor's own host that must not leak into an agent.
_SCRUB = ("TMUX", "TMUX_PANE", "CLAUDE_EFFORT", "CLAUDE_CODE_EFFORT_LEVEL")


@dataclass(frozen=True)
class StepPlan:
    """A discovered step file and its parsed frontmatter."""

    file: StepFile
    frontmatter: Frontmatter


@dataclass(frozen=True)
class StepResult:
    """The final outcome of a step after retries; ``limit`` is the last effective limit (s)."""

    outcome: StepOutcome
    limit: float | None
    launched: bool


class StepRunner:
    """Runs the steps of the current iteration of ``state``."""

    def __init__(self, boot: Boot, state: RunState, ledger: Ledger, reporter: Reporter,
                 waker: Waker) -> None:
        self.boot = boot
        self.state = state
        self.ledger = ledger
        self.reporter = reporter
        self.waker = waker
        # Token usage of each session so far, by session id: a CLI that reports cumulative
        # thread usage (codex) turns it into per-launch figures (LaunchRequest.prior_usage).
        self.session_usage: dict[str, Usage] = {}

    # -- public -------------------------------------------------------------------------

    def run_step(self, plan: StepPlan, node_md: str) -> StepResult:
        """Run a work step, retrying failed launches ``step_retries`` times."""
        fm = plan.frontmatter.fields
        banner = banner_label(plan.file)
        self.reporter.banner_open(banner)
        started = time.monotonic()
        refused = self._refusal(fm)
        if refused is not None:
            code, refusal = refused
            self.ledger.book_closed_step(
                node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
                step=plan.file.position, step_name=plan.file.name, status=Status.FAILED.value,
                exit_code=code, reason=refusal, cost=0.0)
            outcome = StepOutcome(Status.FAILED, code, refusal)
            self._close_banner(banner, outcome, None, started)
            return StepResult(outcome, None, False)
        attempts = 1 + max(0, self.boot.step_retries)
        result: AttemptResult | None = None
        limit: float | None = None
        for number in range(1, attempts + 1):
            if number > 1:
                self.reporter.notice(f"retrying {plan.file.name} in {self.boot.step_retry_backoff}s "
                                     f"(attempt {number} of {attempts})")
                self._backoff(self.boot.step_retry_backoff)
            limit = self._limit(fm)
            result = self._attempt(plan.file, plan.frontmatter.body, fm, node_md, limit,
                                   retry_number=number, label=step_label(plan.file),
                                   snapshot_suffix="" if number == 1 else f"-{number}")
            if result.outcome.status is not Status.FAILED:
                break
        assert result is not None
        self._close_banner(banner, result.outcome, limit, started)
        return StepResult(result.outcome, limit, result.launched)

    def run_sync(self, before: StepPlan, node_md: str) -> StepResult:
        """Run the SYNC pseudo-step before ``before`` (seed: The SYNC step). Never retried."""
        banner = f"SYNC (before {before.file.name})"
        self.reporter.banner_open(banner)
        started = time.monotonic()
        limit = self._limit({})
        result = self._attempt(before.file, mode_text("SYNC"), {}, node_md, limit,
                               retry_number=1, label=f"SYNC before {step_label(before.file)}",
                               snapshot_suffix="-sync", name="SYNC")
        self._close_banner(banner, result.outcome, limit, started)
        return StepResult(result.outcome, limit, result.launched)

    def book_not_run(self, plans: list[StepPlan], reason: str) -> None:
        """Book steps that will never run as rows opened and closed ``stopped``, cost 0.0."""
        for plan in plans:
            self.ledger.book_closed_step(
                node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
                step=plan.file.position, step_name=plan.file.name, status=Status.STOPPED.value,
                exit_code=0, reason=reason, cost=0.0)

    # -- one attempt --------------------------------------------------------------------

    def _refusal(self, fm: Mapping[str, str]) -> tuple[int, str] | None:
        """(exit code, reason) when the step cannot launch, checked before any attempt
        (ref §4.3 checks 1-2; issue 3: a bad override fails the step, never the run)."""
        if self.boot.detached and fm.get("detached"):
            return 1, "detached: frontmatter is not allowed in a detached node"
        try:
            backend = self._backend(fm)
        except FractalError as exc:
            return 1, clip_reason(f"invalid agent override: {exc}")
        if "agent" in fm and not binary_available(backend.binary(), self.boot.paths.worktree):
            return EXIT_CANNOT_EXEC, clip_reason(f"agent binary not found: {backend.binary()} "
                                                 "(from the step's agent: frontmatter)")
        try:
            provider = self._route(backend, fm)
        except FractalError as exc:
            return 1, clip_reason(f"invalid provider override: {exc}")
        problem = backend.preflight(provider, self.boot.launch_env or os.environ)
        return None if problem is None else (1, clip_reason(problem))

    def _route(self, backend: Backend, fm: Mapping[str, str]) -> str | None:
        """The step's provider route: its ``provider:`` frontmatter (must be supported),
        else the node's route when ``backend`` supports it. Raises InvalidValue."""
        return resolve_route(backend, fm.get("provider"), self.boot.provider)

    def _limit(self, fm: Mapping[str, str]) -> float | None:
        step_timeout = self.state.live.step_timeout
        if "timeout" in fm:
            try:
                step_timeout = parse_duration(fm["timeout"], "timeout")
            except FractalError as exc:
                self.reporter.warning(f"{exc}; using the node's step_timeout instead")
        return effective_step_limit(time.monotonic(), self.state.run_deadline,
                                    self.state.iter_deadline, step_timeout)

    def _backend(self, fm: Mapping[str, str]) -> Backend:
        if "agent" in fm:
            return resolve_backend(fm["agent"], self.boot.paths.worktree)
        return self.boot.backend

    def _attempt(self, file: StepFile, body: str, fm: Mapping[str, str], node_md: str,
                 limit: float | None, *, retry_number: int, label: str, snapshot_suffix: str,
                 name: str | None = None) -> AttemptResult:
        boot, state, paths = self.boot, self.state, self.boot.paths
        backend = self._backend(fm)
        step_detached = boot.detached or is_true(fm.get("detached"))
        resume = None if step_detached else state.sessions.get(backend.name)
        new_session = None if (resume or backend.mints_session) else str(uuid.uuid4())
        prior = None
        if resume:  # the run's own figures, else the record (an adopted run starts empty)
            prior = self.session_usage.get(resume) or self.ledger.session_usage(paths.branch,
                                                                                resume)
        model = fm.get("model") or state.live.model
        facts = self._facts(label, limit, model, step_detached)
        modes = self._modes()
        prompt = render(assemble_prompt(node_md, body, modes),
                        prompt_variables(static_facts(paths, state.live), facts))
        request = LaunchRequest(prompt=prompt, worktree=paths.worktree, node_dir=paths.node_dir,
                                model=model, effort=fm.get("effort") or state.live.effort,
                                resume=resume, new_session=new_session,
                                provider=self._route(backend, fm), prior_usage=prior)
        ref = f"{state.run_id}-{state.iteration}-{file.position}"
        attempt = Attempt(
            node=paths.branch, run_id=state.run_id, iter_id=state.iter_id, step=file.position,
            step_name=name or file.name, backend=backend, request=request, limit=limit,
            err_path=paths.agent_err(backend.name),
            err_snapshot=paths.err_dir / f"{ref}{snapshot_suffix}.err",
            retry=retry_number > 1, gated=name is None and is_true(fm.get("requires_approval")))

        def env_for(step_id: int) -> dict[str, str]:
            env = dict(boot.launch_env or os.environ)
            for key in _SCRUB:
                env.pop(key, None)
            env.update(agent_environment(static_facts(paths, boot.config),
                                         _with_step(facts, step_id), str(paths.node_dir)))
            return env

        result = run_attempt(attempt, ledger=self.ledger, reporter=self.reporter,
                             waker=self.waker, env_for=env_for)
        # A minted id counts only once the agent echoed it: a CLI that died before
        # starting the session cannot be resumed into it.
        session = result.session or resume
        if session and result.usage is not None:
            before = prior if session == resume and prior is not None else (0, 0, 0)
            self.session_usage[session] = (before[0] + result.usage[0],
                                           before[1] + result.usage[1],
                                           before[2] + result.usage[2])
        if session and not step_detached and result.launched:
            state.sessions[backend.name] = session
            if backend.name == boot.backend.name and state.iter_id is not None:
                self.ledger.set_iteration_session(state.iter_id, session)
        return result

    def _modes(self) -> list[str]:
        boot = self.boot
        names = [n for n, on in (("CONTINUE", boot.continue_mode), ("RESUME", boot.resume_mode),
                                 ("DETACHED", boot.detached), ("META", boot.meta)) if on]
        return [mode_text(n) for n in names]

    def _facts(self, label: str, limit: float | None, model: str | None,
               step_detached: bool) -> StepFacts:
        boot, state, live = self.boot, self.state, self.state.live
        return StepFacts(
            run_id=state.run_id, iteration=state.iteration, iter_id=state.iter_id, step_id=None,
            step_label=label, iter_label=iter_label(state.iteration, live.max_iters),
            iter_ref=iter_ref(state.run_id, state.iteration), iter_timestamp=state.iter_timestamp,
            time_budget=time_budget_label(boot.run_timeout, boot.iter_timeout, live.step_timeout),
            cost_budget="no limit" if live.max_cost is None else f"${live.max_cost:g} max",
            continue_mode=boot.continue_mode, resume_mode=boot.resume_mode, reserve_mode=False,
            detached_mode=boot.detached, meta_mode=boot.meta, agent_command=boot.agent_setting,
            max_cost=live.max_cost, max_iter_cost=live.max_iter_cost,
            max_step_cost=live.max_step_cost, step_budget=None, run_timeout=boot.run_timeout,
            iter_timeout=boot.iter_timeout, step_timeout=live.step_timeout,
            interval=boot.interval, step_limit=limit,
            run_end_epoch=monotonic_to_epoch(state.run_deadline),
            iter_end_epoch=monotonic_to_epoch(state.iter_deadline),
            step_model=model, step_detached=step_detached)

    def _backoff(self, seconds: int) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.waker.wait(min(1.0, left))

    def _close_banner(self, banner: str, outcome: StepOutcome, limit: float | None,
                      started: float) -> None:
        took = time.monotonic() - started
        if outcome.status is Status.COMPLETED:
            text = "done"
        elif outcome.reason == "timed out" or outcome.reason.startswith("timed out"):
            text = f"timed out (exit {outcome.exit_code}, limit {round(limit or 0)}s)"
        else:
            text = f"{outcome.status.value} (exit {outcome.exit_code}): {outcome.reason}"
        self.reporter.banner_close(banner, text, took)


def _with_step(facts: StepFacts, step_id: int) -> StepFacts:
    return replace(facts, step_id=step_id)
