"""The supervisor's state: what is pinned at boot, and what changes as the run goes.

The agent, detached, meta, sync, the run and iteration timeouts, the pacing keys and the
retry keys are pinned for the run (``Boot``); max_iters, step_timeout, wait and the cost
caps are re-read at each iteration top into ``RunState.live`` (a malformed edit warns and
keeps the previous value). The wiring every part of one run's loop shares is
``runtime/loopparts.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fractal.agents.base import Backend
from fractal.domain.checks import CheckTrack
from fractal.domain.config import NodeConfig
from fractal.domain.errors import FractalError
from fractal.domain.failstreak import FailStreak
from fractal.domain.outcome import RunEnd
from fractal.domain.variables import StaticFacts
from fractal.tree import NodePaths, parent_of


class RunAbort(FractalError):
    """The run cannot go on (preflight failure, unreadable step file, the node's worktree
    or branch gone): it ends ``exited`` with the message as its reason."""


def check_checkout(paths: NodePaths) -> None:
    """Raise RunAbort when the node's worktree or branch vanished behind the loop's back:
    nothing may run outside the node's own checkout."""
    from fractal.workspace.worktrees import worktree_gone

    gone = worktree_gone(paths.worktree, paths.branch)
    if gone is not None:
        what = paths.worktree if gone == "worktree" else paths.branch
        raise RunAbort(f"the node's {gone} is gone: {what}")


@dataclass(frozen=True)
class Boot:
    """Values pinned when the run boots. Durations in seconds, None when unset."""

    paths: NodePaths
    config: NodeConfig
    agent_setting: str
    backend: Backend
    continue_mode: bool
    resume_mode: bool
    launch_env: dict[str, str]
    #: The provider route of ``backend`` (resolved at preflight; None: the CLI's own).
    provider: str | None = None
    #: Some launch is priced from token usage: the price table is refreshed daily.
    pricing: bool = False
    #: The absolute path of the ``fractal`` the run belongs to (``FRACTAL_BIN``).
    fractal_bin: str = "fractal"
    #: A resume adopted a run parked in a provider-outage wait: its first launch probes at
    #: once, cutting the wait short (``runtime.outagewait``).
    outage_cut: bool = False

    @property
    def detached(self) -> bool:
        return self.config.detached

    @property
    def sync(self) -> bool:
        return self.config.sync

    @property
    def meta(self) -> bool:
        return self.config.meta is not None

    @property
    def run_timeout(self) -> int | None:
        return self.config.timeout

    @property
    def iter_timeout(self) -> int | None:
        return self.config.iter_timeout

    @property
    def interval(self) -> int | None:
        return self.config.interval

    @property
    def sleep(self) -> int | None:
        return self.config.sleep

    @property
    def step_retries(self) -> int:
        return self.config.step_retries

    @property
    def step_retry_backoff(self) -> int:
        return self.config.step_retry_backoff or 10


@dataclass
class BudgetState:
    """Cost bookkeeping of the run, kept by its ``BudgetGuard``. ``reason`` is the bound this run
    tripped (a budget landing); ``run_spent``/``iter_spent`` the last good spend reads (USD),
    kept when a read fails; ``run_priced``/``run_unpriced`` the launched steps with and
    without a cost at that read; ``read_at`` (monotonic s; None: stale) and ``read_iter``
    date it; ``warned`` the once-per-run warnings already given; ``run_cap`` the ceiling
    the run's row records (USD; None: uncapped), read with the spend (``cap_read``: it
    was read at least once)."""

    reason: str | None = None
    run_spent: float | None = None
    iter_spent: float | None = None
    run_priced: int = 0
    run_unpriced: int = 0
    read_at: float | None = None
    read_iter: int | None = None
    warned: set[str] = field(default_factory=set)
    run_cap: float | None = None
    cap_read: bool = False


@dataclass(frozen=True)
class Reentry:
    """The parked iteration a resume re-enters (its prompts carry the RESUME mode).

    ``position`` is the first step position to run (1: all of them); ``gate`` the step_id
    of an approval gate parked mid-wait and still unapproved (wait again, don't rerun it);
    ``started``/``deadline`` are clock seconds with the parked time credited back
    (``deadline`` None: no iteration wall); ``timestamp`` is when the iteration began (UTC).
    """

    iter_id: int
    position: int
    gate: int | None
    started: float
    timestamp: str
    deadline: float | None


@dataclass
class RunState:
    """Mutable state of the current run. Deadlines and ``iter_started`` are clock seconds.

    One writer each: ``run_deadline`` and ``gates`` are fixed when the supervisor builds
    the state (a resume restores them and the parked ``checks``, ``fail_streak`` and ``reentry``); the
    ``iter_*`` fields belong to the iteration runner, which opens, re-enters and drains
    iterations (a resume only names the parked ``iter_id`` and its ``reentry``); a wait
    whose time the walls do not count (a usage window's) moves both deadlines only
    through ``credit_walls``; the end facts (``timed_out``, ``stopped``,
    ``finish_drained``, ``done``, ``crash_reason``, ``last_iter_ok``, ``step_end``, the
    failure counts) belong to the run loop; ``budget`` and ``reserve`` to the run's one
    ``BudgetGuard``; ``checks`` to the check runner (the exit check, a gate's check);
    ``sessions`` to the run's launches; ``held_gate`` to the approval gate. What belongs
    to one step kind (a pool's end, a usage window's probe, a step's near-limit report)
    lives in that kind's own per-run object, never here.
    """

    run_id: int
    live: NodeConfig
    run_deadline: float | None = None
    iteration: int = 0
    iter_id: int | None = None
    iter_started: float = 0.0
    iter_timestamp: str = ""
    iter_deadline: float | None = None
    sessions: dict[str, str] = field(default_factory=dict)
    setup_failures: int = 0
    discovery_failures: int = 0
    last_iter_ok: bool = True
    timed_out: bool = False  # a time wall ended the run
    reserve: bool = False  # the rest of this iteration runs in reserve mode
    stopped: bool = False  # a stop signal ended the run
    finish_drained: bool = False  # a finish signal ended the run, children drained
    done: str | None = None  # the node's own `node done` ended the run: its reason ("": none)
    crash_reason: str | None = None  # what ended a run that no other rule explains
    #: The step names gated when the run started: each stays gated for the whole run,
    #: whatever its step file says later (``stepbuild.held_gates``).
    gates: tuple[str, ...] = ()
    #: The gated step row whose approval the loop is waiting for (None when none is): an
    #: interruption parks it ``awaiting approval`` so a resume waits again, not reruns it.
    held_gate: int | None = None
    #: How a step kind ended the run (a pool's end, a usage window's), from the iteration's
    #: result; None when no kind did.
    step_end: RunEnd | None = None
    #: Failed iterations in a row so far (``max_failed_iters`` of them end the run).
    fail_streak: FailStreak = field(default_factory=FailStreak)
    #: The parked iteration a resume re-enters first (None once it ran, or on a fresh run).
    reentry: Reentry | None = None
    budget: BudgetState = field(default_factory=BudgetState)
    #: The run's exit checks and gates: newest result, no-progress streak.
    checks: CheckTrack = field(default_factory=CheckTrack)

    def credit_walls(self, seconds: float) -> None:
        """Move the run and iteration deadlines ``seconds`` later (a wait whose time does
        not count against the walls: a usage window's)."""
        if self.run_deadline is not None:
            self.run_deadline += seconds
        if self.iter_deadline is not None:
            self.iter_deadline += seconds


def static_facts(paths: NodePaths, config: NodeConfig,
                 fractal_bin: str = "fractal") -> StaticFacts:
    """The static template variables of a node under ``config``; ``fractal_bin`` is the
    path of the run's ``fractal`` (``Boot.fractal_bin``)."""
    worktree = paths.worktree
    return StaticFacts(
        repo_dir=str(paths.tree.repo),
        project_dir=str(paths.tree.repo),
        worktree_dir=str(worktree),
        node_dir=str(paths.node_dir),
        plans_dir=str(paths.plans_dir),
        memory_dir=str(paths.memory_dir),
        wiki_dir=str(worktree / "wiki"),  # the shared wiki as this node's branch holds it
        branch=paths.branch,
        scope=tuple(str(Path(worktree, s)) for s in config.scope),
        max_depth=config.max_depth,
        max_children=config.max_children,
        max_descendants=config.max_descendants,
        meta_target=config.meta,
        parent=parent_of(paths.branch) or "",
        fractal_bin=fractal_bin,
    )
