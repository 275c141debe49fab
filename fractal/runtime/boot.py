"""Boot-time pieces of the supervisor: how it was launched, the environment it inherits,
the preflight that resolves the agent, and the brakes that park a run before it starts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NamedTuple

from fractal.agents.base import Backend, binary_problem, resolve_route
from fractal.agents.registry import resolve_backend
from fractal.control import latched, paused_ancestor
from fractal.domain.config import NodeConfig, parse_config
from fractal.domain.errors import FractalError, StepFileError
from fractal.domain.outcome import clip_reason
from fractal.domain.states import Status
from fractal.domain.values import by_type
from fractal.pricing import PricingError
from fractal.procs.processes import process_create_time
from fractal.runtime import sandboxing
from fractal.runtime.context import Boot, RunAbort
from fractal.runtime.costing import check_pricing
from fractal.runtime.iteration import load_plans
from fractal.runtime.steprunner import StepPlan
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths
from fractal.workspace.agenthomes import seed_agent_homes
from fractal.workspace.nodedir import read_config


class Interrupted(BaseException):
    """The supervisor received SIGTERM, SIGHUP or SIGINT."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@by_type
class RunOptions(NamedTuple):
    """How the run was launched: ``--continue`` (a new run of a settled node) or ``--resume``."""

    continue_mode: bool = False
    resume_mode: bool = False


def raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # one teardown only
    raise Interrupted(signum)


def load_launch_env(path: Path) -> dict[str, str]:
    """The environment ``fractal node start`` snapshotted for this run, then deleted.

    Falls back to this process's environment when there is none. (The file exists so
    API keys never sit in the argv of a long-lived process.)
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
    except (OSError, ValueError, RecursionError):
        return dict(os.environ)
    if not isinstance(data, dict):
        return dict(os.environ)
    return {str(k): str(v) for k, v in data.items()}


def read_boot_config(paths: NodePaths) -> tuple[NodeConfig | None, str]:
    """The node's config, or (None, the problem) when it cannot be read or is invalid."""
    try:
        raw = read_config(paths.config_path)
        return parse_config(raw, source=str(paths.config_path)), ""
    except (FractalError, OSError) as exc:
        return None, clip_reason(str(exc))


def preflight(paths: NodePaths, options: RunOptions, config: NodeConfig,
              launch_env: dict[str, str], warn: Callable[[str], None]) -> Boot:
    """Resolve the agent and check its binary, route, step files and price table; returns
    what the run pins at boot. Raises RunAbort naming the problem."""
    refused = sandboxing.refusal()  # `sandbox: auto|on` where no sandbox can run
    if refused:
        raise RunAbort(refused)
    setting = config.agent or str(paths.tree.root_config().get("agent") or "") or None
    try:
        backend = resolve_backend(setting, paths.worktree)
    except FractalError as exc:
        raise RunAbort(f"invalid agent: {exc}") from None
    problem = binary_problem(backend.binary(), paths.worktree)
    if problem is not None:
        raise RunAbort(f"{problem}; install it or set the node's agent")
    provider = route(paths, backend, config, launch_env, warn)
    plans: list[StepPlan] = []
    with contextlib.suppress(StepFileError):  # a broken steps dir fails iterations, loudly
        plans = load_plans(paths.steps_dir)
    try:  # the price table, when some launch is priced from tokens
        pricing = check_pricing(config.model, backend, provider,
                                [p.frontmatter.fields for p in plans], paths.worktree, warn,
                                capped=config.max_cost is not None)
    except PricingError as exc:
        raise RunAbort(str(exc)) from None
    return Boot(paths=paths, config=config, agent_setting=setting or backend.name,
                backend=backend, continue_mode=options.continue_mode,
                resume_mode=options.resume_mode, launch_env=launch_env,
                provider=provider, pricing=pricing)


def route(paths: NodePaths, backend: Backend, config: NodeConfig, env: dict[str, str],
          warn: Callable[[str], None]) -> str | None:
    """The node's provider route, checked against ``env``; seeds the agent homes.

    The node's own ``provider`` must be supported; the tree's is dropped when the
    backend does not support it. Raises RunAbort naming
    the problem (an unsupported route, a missing key).
    """
    inherited = paths.tree.root_config().get("provider")
    try:
        provider = resolve_route(backend, config.provider,
                                 inherited if isinstance(inherited, str) else None)
    except FractalError as exc:
        raise RunAbort(f"invalid provider: {exc}") from None
    problem = backend.preflight(provider, env)
    if problem is not None:
        raise RunAbort(problem)
    try:
        seed_agent_homes(paths.node_dir, env)  # re-seeded when missing
    except OSError as exc:
        warn(f"could not seed the agent homes: {exc}")
    return provider


def brake_reason(paths: NodePaths, ledger: Ledger, *, fresh: bool) -> str | None:
    """Why this run must park before it starts: the tree-wide latch, or (on a fresh
    boot) an ancestor that is paused or pausing — a child that booted while its parent's
    pause swept the subtree parks itself (a resume boot skips that walk: the resume
    verb already refused it under a paused ancestor)."""
    if latched(paths.tree):
        return "the tree is paused (fractal resume lifts it)"
    if fresh:
        ancestor = paused_ancestor(paths.tree, ledger, paths.branch)
        if ancestor is not None:
            return f"ancestor {ancestor} is paused"
    return None


def taken_for(ledger: Ledger, branch: str, status: Status | None, pid: int) -> bool:
    """True when the verb that hosted this supervisor (``pid``) already took the node for
    it: ``branch`` is active under the pane's pid, this process or the shell that started
    it (whose pid is then replaced by this one)."""
    if status is not Status.ACTIVE:
        return False
    row = ledger.node(branch)
    if row is None or row.supervisor_pid not in (pid, os.getppid()):
        return False
    if row.supervisor_pid != pid:
        ledger.set_supervisor(branch, pid, process_create_time(pid))
    return True
