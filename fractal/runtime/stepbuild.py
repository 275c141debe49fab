"""Build one launch: the prompt (NODE.md, the step body, the active mode documents, the
template variables filled in), the agent's environment, the session to resume (continuous
mode keeps one per agent setting; detached mode and ``detached:`` steps start fresh), and
the ``Attempt``."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from fractal.agents.base import Backend, LaunchRequest, Usage, resolve_route
from fractal.agents.registry import resolve_backend
from fractal.assets import mode_text
from fractal.domain.checks import check_variables, visible_check
from fractal.domain.errors import FractalError
from fractal.domain.frontmatter import is_true
from fractal.domain.gates import GATES_EVENT, gates_note
from fractal.domain.pool import pool_document
from fractal.domain.render import assemble_prompt, iter_label, iter_ref, render
from fractal.domain.steps import StepFile, discover_steps
from fractal.domain.variables import (
    StepFacts,
    TreeFacts,
    agent_environment,
    may_spawn,
    prompt_variables,
    tree_variables,
)
from fractal.domain.waits import children_waited
from fractal.domain.walls import time_budget_label
from fractal.runtime.clock import Clock, monotonic_to_epoch
from fractal.runtime.context import Boot, RunState, static_facts
from fractal.runtime.costing import LaunchBudget, PricedBackend
from fractal.runtime.filecache import FILES, parse_step_file
from fractal.runtime.launch import Attempt, RowPolicy
from fractal.store.ledger import Ledger
from fractal.tree import parent_of
from fractal.workspace.handback import read_note, resolve_document
from fractal.workspace.poolseed import WORKER_STEPS

# The packaged mode documents do not change while a supervisor runs: each is read once.
_mode_text = functools.cache(mode_text)
# Variables of the supervisor's own host that must not leak into an agent.
_SCRUB = ("TMUX", "TMUX_PANE", "CLAUDE_EFFORT", "CLAUDE_CODE_EFFORT_LEVEL")


@dataclass(frozen=True)
class Launch:
    """A built attempt, the session key it runs under, and how to build its environment."""

    attempt: Attempt
    session_key: str
    detached: bool
    prior: Usage | None
    env_for: Callable[[int], dict[str, str]]


def gated_steps(steps_dir: Path) -> tuple[str, ...]:
    """Names of the steps in ``steps_dir`` whose frontmatter sets ``requires_approval:
    true``, in order (unreadable files are left out: the iteration reports them)."""
    try:
        names = [p.name for p in steps_dir.iterdir() if p.is_file()]
        found = discover_steps(names)
    except (OSError, FractalError):
        return ()
    gated: list[str] = []
    for step in found:
        try:
            frontmatter, _warnings = FILES.get(steps_dir / step.filename, parse_step_file)
        except (OSError, UnicodeDecodeError):
            continue
        if is_true(frontmatter.fields.get("requires_approval")):
            gated.append(step.name)
    return tuple(gated)


def held_gates(ledger: Ledger, branch: str, steps_dir: Path, run_id: int, *,
               resumed: bool) -> tuple[str, ...]:
    """The step names run ``run_id`` holds as approval gates for its whole life: on a fresh
    run those its step files gate now, recorded as its ``gates`` event (when any); on a
    resume the ones that event recorded (a step file edited since changes nothing)."""
    if resumed:
        return ledger.run_gates(branch, run_id)
    gates = gated_steps(steps_dir)
    if gates:
        ledger.add_event(branch, GATES_EVENT, actor="loop", status="completed",
                         metadata=gates_note(gates), run_id=run_id)
    return gates



def session_key(boot: Boot, fm: Mapping[str, str]) -> str:
    """Sessions are kept per agent *setting* (two different commands never share one)."""
    return fm.get("agent") or boot.agent_setting


def step_backend(boot: Boot, fm: Mapping[str, str]) -> Backend:
    """The step's backend: its ``agent:`` override, else the node's. Raises InvalidValue."""
    if "agent" in fm:
        return resolve_backend(fm["agent"], boot.paths.worktree)
    return boot.backend


def step_route(boot: Boot, backend: Backend, fm: Mapping[str, str]) -> str | None:
    """The step's provider route: ``provider:`` frontmatter (must be supported), else the
    node's route when ``backend`` supports it. Raises InvalidValue."""
    return resolve_route(backend, fm.get("provider"), boot.provider)


class StepBuilder:
    """Builds attempts for the current iteration of ``state``."""

    def __init__(self, boot: Boot, state: RunState, ledger: Ledger,
                 session_usage: dict[str, Usage], clock: Clock,
                 spent: Callable[[], float] | None = None) -> None:
        self.clock = clock
        self.spent = spent  # USD the run's subtree spent so far (the tree protocol's budget)
        self.boot = boot
        self.state = state
        self.ledger = ledger
        self.session_usage = session_usage

    def build(self, file: StepFile, body: str, fm: Mapping[str, str], node_md: str,
              limit: float | None, *, retry_number: int, label: str, snapshot_suffix: str,
              name: str | None = None, gated: bool = False,
              should_pause: Callable[[], bool] | None = None,
              lenient: bool = False, budget: LaunchBudget | None = None) -> Launch:
        """The attempt for ``file`` (or a SYNC named ``name``) with ``limit`` seconds.

        ``budget`` (the per-step budget) reaches an enforcing agent as its budget flag,
        and the prompt and environment as COST_BUDGET / STEP_BUDGET; its ``rates`` price a
        token-priced backend's usage.
        """
        boot, state, paths = self.boot, self.state, self.boot.paths
        backend = step_backend(boot, fm)
        if budget is not None and budget.rates is not None:
            backend = PricedBackend(backend, budget.rates)
        key = session_key(boot, fm)
        detached = boot.detached or is_true(fm.get("detached"))
        resume = None if detached else state.sessions.get(key)
        prior = None
        if resume:  # the run's own figures, else the record (an adopted run starts empty)
            prior = self.session_usage.get(resume) or self.ledger.session_usage(paths.branch,
                                                                                resume)
        model = fm.get("model") or state.live.model
        facts = self.facts(label, limit, model, detached, budget)
        checks = check_variables(visible_check(state.checks, state.iteration))
        prompt = render(assemble_prompt(node_md, body, self.modes()),
                        {**prompt_variables(static_facts(paths, state.live, boot.fractal_bin), facts),
                         **tree_variables(self.tree_facts()), **checks})
        request = LaunchRequest(
            prompt=prompt, worktree=paths.worktree, node_dir=paths.node_dir, model=model,
            effort=fm.get("effort") or state.live.effort, resume=resume,
            new_session=None if (resume or backend.mints_session) else str(uuid.uuid4()),
            provider=step_route(boot, backend, fm), prior_usage=prior,
            budget_usd=budget.usd if budget is not None and backend.enforces_budget else None)
        ref = f"{state.run_id}-{state.iteration}-{file.position}"
        attempt = Attempt(
            node=paths.branch, run_id=state.run_id, iter_id=state.iter_id, step=file.position,
            step_name=name or file.name, backend=backend, request=request, limit=limit,
            err_path=paths.agent_err(backend.name),
            err_snapshot=paths.err_dir / f"{ref}{snapshot_suffix}.err",
            retry=retry_number > 1, should_pause=should_pause,
            row=RowPolicy.HOLD_OPEN if gated else RowPolicy.LENIENT if lenient
            else RowPolicy.CLOSE)
        return Launch(attempt, key, detached, prior, self._env_builder(facts, checks))

    def _env_builder(self, facts: StepFacts,
                     checks: Mapping[str, str]) -> Callable[[int], dict[str, str]]:
        """The agent's environment once its step row exists: the launch environment minus
        the supervisor's own host variables, plus the loop's variables and CHECK_*."""
        boot, paths = self.boot, self.boot.paths

        def env_for(step_id: int) -> dict[str, str]:
            env = dict(boot.launch_env or os.environ)
            for var in _SCRUB:
                env.pop(var, None)
            env.update(agent_environment(static_facts(paths, boot.config, boot.fractal_bin),
                                         replace(facts, step_id=step_id), str(paths.node_dir)))
            env.update(checks)
            # Values come from agents, checks and operators: a NUL would make exec fail.
            return {k: v.replace("\0", "") for k, v in env.items() if "\0" not in k}

        return env_for

    def modes(self) -> list[str]:
        """The mode documents active for this step, in order: CONTINUE, RESUME (the
        re-entered iteration of a resumed run), RESERVE, DETACHED, META, TREE (the node's
        live caps allow a child), CHILD (the node has a parent), and RESOLVE (with its
        files) while a hand-back note sits in the node directory."""
        boot, state = self.boot, self.state
        spawns = may_spawn(state.live.max_children, state.live.max_depth)
        names = [n for n, on in (("CONTINUE", boot.continue_mode),
                                 ("RESUME", state.reentry is not None),
                                 ("RESERVE", state.reserve),
                                 ("DETACHED", boot.detached), ("META", boot.meta),
                                 ("TREE", spawns),
                                 ("CHILD", parent_of(boot.paths.branch) is not None)) if on]
        texts = [_mode_text(n) for n in names]
        note = read_note(boot.paths.node_dir)  # a conflict handed back by `node merge`
        if note is not None:
            texts.append(resolve_document(note))
        pool = self.pool_section()
        if pool is not None:
            texts.append(pool)
        return texts

    def pool_section(self) -> str | None:
        """A pool node's items and results with the review's command (None for any other
        node: one without a ``worker-steps/`` directory, or no pool row)."""
        paths = self.boot.paths
        if not (paths.node_dir / WORKER_STEPS).is_dir():
            return None
        from fractal.store.pool import PoolStore

        store = PoolStore(paths.tree.db_path)
        found = store.pool(paths.branch)
        if found is None:
            return None
        return pool_document(paths.branch, store.items(paths.branch), found[2])

    def tree_facts(self) -> TreeFacts:
        """The tree protocol's facts now: live direct children, caps, spend, gated steps."""
        live, branch = self.state.live, self.boot.paths.branch
        children = len(children_waited(branch, [(r.node, r.status)
                                                for r in self.ledger.nodes()]))
        return TreeFacts(children=children, max_children=live.max_children,
                         max_depth=live.max_depth, max_cost=live.max_cost,
                         spent=self.spent() if self.spent is not None else 0.0,
                         gated=gated_steps(self.boot.paths.steps_dir))

    def facts(self, label: str, limit: float | None, model: str | None,
              step_detached: bool, budget: LaunchBudget | None = None) -> StepFacts:
        """The run-scoped variables of one launch (``budget``: its cost side, if known)."""
        boot, state, live = self.boot, self.state, self.state.live
        return StepFacts(
            run_id=state.run_id, iteration=state.iteration, iter_id=state.iter_id, step_id=None,
            step_label=label, iter_label=iter_label(state.iteration, live.max_iters),
            iter_ref=iter_ref(state.run_id, state.iteration), iter_timestamp=state.iter_timestamp,
            time_budget=time_budget_label(boot.run_timeout, boot.iter_timeout, live.step_timeout),
            cost_budget=budget.label if budget is not None else "no limit",
            continue_mode=boot.continue_mode, resume_mode=state.reentry is not None,
            reserve_mode=state.reserve, detached_mode=boot.detached, meta_mode=boot.meta,
            agent_command=boot.agent_setting, max_cost=live.max_cost,
            max_iter_cost=live.max_iter_cost, max_step_cost=live.max_step_cost,
            step_budget=budget.usd if budget is not None else None,
            run_timeout=boot.run_timeout, iter_timeout=boot.iter_timeout,
            step_timeout=live.step_timeout, interval=boot.interval, step_limit=limit,
            run_end_epoch=monotonic_to_epoch(self.clock, state.run_deadline),
            iter_end_epoch=monotonic_to_epoch(self.clock, state.iter_deadline),
            step_model=model, step_detached=step_detached)
