"""The supervisor's state: what is pinned at boot, and what changes as the run goes.

Seed: "Steering a running loop" — the agent, detached, meta, sync, the run and
iteration timeouts, the pacing keys and the retry keys are pinned for the run;
max_iters, step_timeout, wait and the cost caps are re-read at each iteration top (a
malformed edit warns and keeps the previous value).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from fractal.agents.base import Backend
from fractal.domain.checks import CheckTrack
from fractal.domain.config import NodeConfig
from fractal.domain.variables import StaticFacts
from fractal.runtime.pane import Reporter
from fractal.runtime.steering import Steering
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths


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
    """Cost bookkeeping of the run (seed: Cost ceilings). ``reason`` is the bound this run
    tripped (a budget landing); ``run_spent``/``iter_spent`` the last good spend reads (USD),
    kept when a read fails; ``run_priced``/``run_unpriced`` the launched steps with and
    without a cost at that read; ``read_at`` (monotonic s; None: stale) and ``read_iter``
    date it; ``warned`` the once-per-run warnings already given."""

    reason: str | None = None
    run_spent: float | None = None
    iter_spent: float | None = None
    run_priced: int = 0
    run_unpriced: int = 0
    read_at: float | None = None
    read_iter: int | None = None
    warned: set[str] = field(default_factory=set)


@dataclass
class RunState:
    """Mutable state of the current run. Deadlines are ``time.monotonic()`` seconds."""

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
    timed_out: bool = False
    max_iters_reached: bool = False
    reserve: bool = False  # reserve mode for this iteration (seed: Reserve mode)
    stopped: bool = False  # a stop signal ended the run
    finish_drained: bool = False  # a finish signal ended the run, children drained
    crash_reason: str | None = None  # what ended a run that no other rule explains
    #: The iteration a resume re-enters: RESUME.md joins its prompts (seed: modes).
    resume_iteration: bool = False
    #: First step position to run in the re-entered iteration (1: all of them).
    resume_position: int = 1
    #: step_id of a gate parked mid-wait and still unapproved: wait again, don't rerun.
    resume_gate: int | None = None
    budget: BudgetState = field(default_factory=BudgetState)
    #: The run's exit checks and gates: newest result, no-progress streak (issue 7).
    checks: CheckTrack = field(default_factory=CheckTrack)


def monotonic_to_epoch(deadline: float | None) -> float | None:
    """Translate a monotonic deadline to wall-clock epoch seconds (for *_END_EPOCH)."""
    if deadline is None:
        return None
    return time.time() + (deadline - time.monotonic())


def static_facts(paths: NodePaths, config: NodeConfig) -> StaticFacts:
    """The static template variables of a node under ``config``."""
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
    )


@dataclass(frozen=True)
class LoopParts:
    """The collaborators every part of one run's loop shares."""

    boot: Boot
    state: RunState
    ledger: Ledger
    reporter: Reporter
    waker: Waker
    steering: Steering


class LoopPart:
    """Base of the loop's parts (RunLoop, IterationRunner, StepRunner): one wiring."""

    def __init__(self, parts: LoopParts) -> None:
        self.parts = parts
        self.boot, self.state, self.ledger = parts.boot, parts.state, parts.ledger
        self.reporter, self.waker, self.steering = parts.reporter, parts.waker, parts.steering
