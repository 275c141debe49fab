"""Boot-time pieces of the supervisor: how it was launched, the environment it inherits,
the preflight that resolves the agent, and the brakes that park a run before it starts."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NamedTuple

from fractal.agents.base import Backend, binary_problem, resolve_route
from fractal.agents.registry import resolve_backend
from fractal.control import latched, paused_ancestor
from fractal.domain.config import NodeConfig, parse_config
from fractal.domain.errors import FractalError, StepFileError
from fractal.domain.run.outcome import clip_reason
from fractal.domain.states import Status
from fractal.domain.values import by_type
from fractal.pricing import PricingError
from fractal.procs.processes import process_create_time
from fractal.runtime import sandboxing
from fractal.runtime.context import Boot, RunAbort
from fractal.runtime.costing import check_pricing
from fractal.runtime.iteration import load_plans
from fractal.runtime.kinds.base import StepPlan
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths
from fractal.workspace import runenv
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
    """The environment this run keeps (``fractal.workspace.runenv``, written by the
    ``fractal node start`` that began the run, replaced only by ``--refresh-env``), read
    and left in place for the next resume.

    Falls back to this process's environment when there is none. (The file exists so
    API keys never sit in the argv of a long-lived process.)
    """
    kept = runenv.load(path)
    return dict(os.environ) if kept is None else kept


_PANE_OWN = ("TMUX", "TMUX_PANE")
"""Variables that name the pane this supervisor runs in: kept from its own process,
never from the environment the run started with (that one names the start shell's)."""


def adopt_launch_env(launch_env: dict[str, str]) -> None:
    """Make this process's environment exactly ``launch_env``, but for the pane's own
    variables: the run behaves as if started from its start shell, and nothing of the
    tmux server that hosts it now (started by whoever relaunched the run) leaks in."""
    own = {k: os.environ[k] for k in _PANE_OWN if k in os.environ}
    os.environ.clear()
    os.environ.update(launch_env)
    os.environ.update(own)


def launch_environment(paths: NodePaths, *, adopt: bool) -> dict[str, str]:
    """The run's environment: the kept one (``load_launch_env``) plus ``_NODE``, the node
    directory, which every child of the loop (setup, checks, agents, hooks) inherits, so
    crash healing finds a dead loop's leftovers by it. ``adopt`` (the pane's own
    supervisor) makes it this process's environment too: the run behaves as if started
    from its start shell."""
    launch_env = load_launch_env(paths.run_env_path)
    launch_env["_NODE"] = str(paths.node_dir)
    if adopt:
        adopt_launch_env(launch_env)
    return launch_env


def fractal_command(paths: NodePaths) -> str:
    """The absolute path of the ``fractal`` this supervisor belongs to, for its agents
    (``FRACTAL_BIN``): the ``fractal`` script beside this interpreter (a venv's or an
    install's ``bin/``), else a stand-in script in the node's ``tmp/bin/`` that runs this
    interpreter on this package (``workspace/fractalshim.py``). An agent that runs its
    commands in a login shell, whose profile resets PATH, reaches it all the same."""
    beside = Path(sys.executable).parent / "fractal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    # deferred: only an install without a script needs it
    from fractal.workspace.fractalshim import write_shim

    package_parent = str(Path(__file__).resolve().parents[2])
    try:
        return str(write_shim(paths.tmp_dir / "bin" / "fractal", sys.executable,
                              package_parent))
    except OSError:
        return "fractal"  # the bare name: whatever the agent's PATH finds


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
                provider=provider, pricing=pricing, fractal_bin=fractal_command(paths))


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
