"""The supervisor: the long-running process in a node's tmux pane that runs one run
of the iteration loop — boot, preflight, iterate, finalize (seed: "Runs, iterations,
and steps", "How a run ends"; ref §4.1, §4.2, §4.11).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from fractal.agents.base import Backend, binary_available, resolve_backend, resolve_route
from fractal.domain.config import NodeConfig, parse_config
from fractal.domain.errors import FractalError, StepFileError
from fractal.domain.outcome import RunEnd, RunFacts, Status, clip_reason, decide_run_end
from fractal.domain.walls import pacing_delay, time_budget_label
from fractal.runtime import processes
from fractal.runtime.context import Boot, RunState
from fractal.runtime.iteration import IterationRunner, RunAbort, backstop, load_plans
from fractal.runtime.pane import Reporter
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths, parent_of
from fractal.workspace.agenthomes import seed_agent_homes
from fractal.workspace.nodedir import read_config

log = logging.getLogger(__name__)

CRASH_LOOP = 3  # consecutive setup (or discovery) failures that end a run (seed: setup)


class Interrupted(BaseException):
    """The supervisor received SIGTERM, SIGHUP or SIGINT."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@dataclass(frozen=True)
class RunOptions:
    """How the run was launched: ``--continue`` (a new run of a settled node) or ``--resume``."""

    continue_mode: bool = False
    resume_mode: bool = False


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # one teardown only
    raise Interrupted(signum)


def load_launch_env(path: Path) -> dict[str, str]:
    """The environment ``fractal node start`` snapshotted for this run, then deleted.

    Falls back to this process's environment when there is none (ref: keys never sit
    in the argv of a long-lived process).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
    except (OSError, ValueError):
        return dict(os.environ)
    if not isinstance(data, dict):
        return dict(os.environ)
    return {str(k): str(v) for k, v in data.items()}


class Supervisor:
    """Runs one run of a node's loop. ``run()`` returns the process exit code."""

    def __init__(self, paths: NodePaths, options: RunOptions, reporter: Reporter) -> None:
        self.paths = paths
        self.options = options
        self.reporter = reporter
        self.ledger = Ledger(paths.tree.db_path)
        self.waker = Waker()
        self.state: RunState | None = None

    # -- entry --------------------------------------------------------------------------

    def run(self) -> int:
        """Boot, run iterations until the run ends, finalize. Never raises."""
        node = self.paths.branch
        if not self.ledger.compare_and_set_status(node, {Status.IDLE.value}, Status.ACTIVE.value):
            row = self.ledger.node(node)
            self.reporter.warning(f"node {node} is {row.status if row else 'unregistered'}, "
                                  "not idle; this supervisor will not run it")
            return 1
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, _raise_interrupted)
        processes.become_subreaper()
        self.ledger.set_supervisor(node, os.getpid(), processes.process_create_time(os.getpid()))
        self.waker.watch(self.paths.node_dir)
        try:
            return self._run()
        except Interrupted as exc:
            self._interrupted(exc)
            return 128 + exc.signum
        except Exception as exc:
            log.exception("supervisor crashed")
            self.reporter.warning(f"supervisor crashed: {type(exc).__name__}: {exc}")
            return 1
        finally:
            self._on_exit()

    def _run(self) -> int:
        launch_env = load_launch_env(self.paths.launch_env_path)
        os.environ.update(launch_env)  # the run behaves as if started from the caller's shell
        config, problem = self._read_boot_config()
        parent = parent_of(self.paths.branch)
        parent_run = self.ledger.active_run_id(parent) if parent else None
        run_id = self.ledger.open_run(self.paths.branch, agent=config.agent if config else None,
                                      max_cost=config.max_cost if config else None,
                                      parent_run_id=parent_run)
        self.reporter.banner_open(f"Run {run_id} of {self.paths.branch} at "
                                  f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
                                  major=True)
        try:
            if config is None:
                raise RunAbort(problem)
            boot = self._preflight(config, launch_env)
        except RunAbort as exc:
            return self._abort(run_id, str(exc))
        state = RunState(run_id=run_id, live=config)
        if boot.run_timeout is not None:
            state.run_deadline = time.monotonic() + boot.run_timeout
        self.state = state
        try:
            self._iterate(boot, state)
        except RunAbort as exc:
            return self._abort(run_id, str(exc))
        self._finalize(boot, state)
        return 0

    # -- boot ---------------------------------------------------------------------------

    def _read_boot_config(self) -> tuple[NodeConfig | None, str]:
        try:
            raw = read_config(self.paths.config_path)
            return parse_config(raw, source=str(self.paths.config_path)), ""
        except FractalError as exc:
            return None, clip_reason(str(exc))

    def _preflight(self, config: NodeConfig, launch_env: dict[str, str]) -> Boot:
        """Resolve the agent and check its binary and step files (ref §4.1). Raises RunAbort."""
        setting = config.agent or str(self.paths.tree.root_config().get("agent") or "") or None
        try:
            backend = resolve_backend(setting, self.paths.worktree)
        except FractalError as exc:
            raise RunAbort(f"invalid agent: {exc}") from None
        if not binary_available(backend.binary(), self.paths.worktree):
            raise RunAbort(f"agent binary not found: {backend.binary()} "
                           "(install it or set the node's agent)")
        provider = self._route(backend, config, launch_env)
        with contextlib.suppress(StepFileError):  # a broken steps dir fails iterations, loudly
            load_plans(self.paths.steps_dir)
        return Boot(paths=self.paths, config=config, agent_setting=setting or backend.name,
                    backend=backend, continue_mode=self.options.continue_mode,
                    resume_mode=self.options.resume_mode, launch_env=launch_env,
                    provider=provider)

    def _route(self, backend: Backend, config: NodeConfig, env: dict[str, str]) -> str | None:
        """The node's provider route, checked against ``env``; seeds the agent homes.

        The node's own ``provider`` must be supported; the tree's is dropped when the
        backend does not support it (issue 3: Provider routes). Raises RunAbort naming
        the problem (an unsupported route, a missing key).
        """
        inherited = self.paths.tree.root_config().get("provider")
        try:
            provider = resolve_route(backend, config.provider,
                                     inherited if isinstance(inherited, str) else None)
        except FractalError as exc:
            raise RunAbort(f"invalid provider: {exc}") from None
        problem = backend.preflight(provider, env)
        if problem is not None:
            raise RunAbort(problem)
        try:
            seed_agent_homes(self.paths.node_dir, env)  # re-seeded when missing
        except OSError as exc:
            self.reporter.warning(f"could not seed the agent homes: {exc}")
        return provider

    def _abort(self, run_id: int, reason: str) -> int:
        reason = clip_reason(reason)
        self.reporter.warning(f"run {run_id} cannot go on: {reason}")
        self.ledger.close_run(run_id, Status.EXITED.value, 1, reason)
        self.ledger.close_open(self.paths.branch, Status.EXITED.value, reason)
        self.ledger.set_node_status(self.paths.branch, Status.EXITED.value)
        return 1

    # -- iterate ------------------------------------------------------------------------

    def _iterate(self, boot: Boot, state: RunState) -> None:
        runner = IterationRunner(boot, state, self.ledger, self.reporter, self.waker)
        while True:
            self._refresh_live(state)
            if state.live.max_iters is not None and state.iteration >= state.live.max_iters:
                state.max_iters_reached = True
                return
            if state.run_deadline is not None and time.monotonic() >= state.run_deadline:
                state.timed_out = True
                return
            result = runner.run()
            state.last_iter_ok = result.ok
            state.setup_failures = state.setup_failures + 1 if result.setup_failed else 0
            state.discovery_failures = (state.discovery_failures + 1
                                        if result.discovery_failed else 0)
            if state.setup_failures >= CRASH_LOOP or state.discovery_failures >= CRASH_LOOP:
                return
            self._pace(boot, state)

    def _refresh_live(self, state: RunState) -> None:
        try:
            raw = read_config(self.paths.config_path)
            state.live = parse_config(raw, source=str(self.paths.config_path))
        except FractalError as exc:
            self.reporter.warning(f"config.json edit ignored, keeping the previous values: {exc}")

    def _pace(self, boot: Boot, state: RunState) -> None:
        delay = pacing_delay(time.monotonic(), state.iter_started, boot.interval, boot.sleep,
                             state.run_deadline)
        if delay <= 0:
            return
        self.reporter.notice(f"sleeping {round(delay)}s before the next iteration")
        end = time.monotonic() + delay
        while (left := end - time.monotonic()) > 0:
            self.waker.wait(left)

    # -- the end ------------------------------------------------------------------------

    def _finalize(self, boot: Boot, state: RunState) -> None:
        if state.iteration:
            backstop(self.paths.worktree,
                     f"{self.paths.branch}: iteration {state.run_id}.{state.iteration} (final)",
                     "", self.reporter)
        end = decide_run_end(self._facts(boot, state))
        self._close(state.run_id, end)

    def _facts(self, boot: Boot, state: RunState) -> RunFacts:
        setup_abort = state.setup_failures >= CRASH_LOOP
        return RunFacts(
            run_id=state.run_id, last_iter=state.iteration, max_iters=state.live.max_iters,
            budget_reason=None, setup_aborted=setup_abort, setup_failures=state.setup_failures,
            finish_drained=False, timed_out=state.timed_out,
            walls_label=time_budget_label(boot.run_timeout, boot.iter_timeout,
                                          state.live.step_timeout),
            stopped=False, last_iter_ok=state.last_iter_ok)

    def _close(self, run_id: int, end: RunEnd) -> None:
        self.ledger.close_run(run_id, end.run_status.value, end.exit_code, end.reason)
        self.ledger.set_node_status(self.paths.branch, end.node_status.value)
        self.reporter.banner_open(f"Run {run_id} {end.run_status.value} (exit {end.exit_code}): "
                                  f"{end.reason}", major=True)

    def _interrupted(self, exc: Interrupted) -> None:
        name = signal.Signals(exc.signum).name
        self.reporter.warning(f"received {name}; saving work and closing the run")
        state = self.state
        if state is not None and state.iteration:
            backstop(self.paths.worktree,
                     f"{self.paths.branch}: iteration {state.run_id}.{state.iteration} "
                     f"(interrupted)", f"The supervisor received {name}.", self.reporter)
        self.ledger.add_event(self.paths.branch, "exit", status=Status.EXITED.value,
                              metadata=f"supervisor received {name}",
                              run_id=state.run_id if state else None)

    def _on_exit(self) -> None:
        node = self.paths.branch
        try:
            self.waker.close()
            row = self.ledger.node(node)
            if row is not None and row.status == Status.ACTIVE.value:
                self.ledger.close_open(node, Status.EXITED.value, "Loop exited abnormally")
                self.ledger.set_node_status(node, Status.EXITED.value)
            self.ledger.set_supervisor(node, None, None)
            self.ledger.checkpoint()
        except Exception:
            log.exception("could not close the run cleanly")
