# Over 400 lines: one run's life, from taking the node to its recorded end; every move
# in and out (take, park, abort, close) shares the run's rows, its pane and its pid.
"""The supervisor: the long-running process in a node's tmux pane that runs one run
of the iteration loop — boot, preflight, iterate, finalize — and records how it ended.

Every change of the node's status here is one ``Ledger.move`` (``fractal.domain.states``):
taking the node (START or RESUME, the pid recorded with it), parking (PARK), the run's
end (END), an abort or an exit without a close (ABORT). Each is one transaction with the
rows it closes and the exit notice it posts.

The loop is built here from its parts (``loopparts.LoopParts``): one clock, launcher, waker,
steering reader and budget guard per run. The pane's entry point uses the system clock
and real process groups; a test passes a fake clock and a scripted launcher.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import replace
from datetime import UTC, datetime

from fractal.control import Steering
from fractal.domain.checks.rules import ScoreRules
from fractal.domain.config import NodeConfig
from fractal.domain.run.failstreak import FailStreak, advance_failures
from fractal.domain.run.outcome import (
    ABNORMAL_EXIT,
    AWAITING_APPROVAL,
    RunEnd,
    clip_reason,
)
from fractal.domain.signals import credited_deadline, paused_seconds
from fractal.domain.states import Move, Status
from fractal.procs import processes
from fractal.runtime import heap, sandboxing
from fractal.runtime.adopt import adopt, save_sessions
from fractal.runtime.boot import (
    Interrupted,
    RunOptions,
    brake_reason,
    launch_environment,
    preflight,
    raise_interrupted,
    read_boot_config,
    taken_for,
)
from fractal.runtime.budgetguard import BudgetGuard
from fractal.runtime.clock import Clock, SystemClock
from fractal.runtime.context import Boot, Reentry, RunAbort, RunState
from fractal.runtime.dblocked import park_locked
from fractal.runtime.edges import backstop
from fractal.runtime.ends import (
    finish_reason,
    notify_unsettled,
    record_unmerged,
    refresh_unmerged_above,
    unmerged_reason,
)
from fractal.runtime.launcher import Launcher, ProcessLauncher
from fractal.runtime.loopparts import LoopParts
from fractal.runtime.notices import run_end_draft
from fractal.runtime.outagewait import end_parked_waits
from fractal.runtime.pane import Reporter
from fractal.runtime.runloop import RunLoop
from fractal.runtime.steering import Park
from fractal.runtime.stepbuild import held_gates
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger
from fractal.store.lockwait import DatabaseLocked
from fractal.store.timefmt import format_ts
from fractal.store.transition import EventNote
from fractal.tree import NodePaths, parent_of

log = logging.getLogger(__name__)


class Supervisor:
    """Runs one run of a node's loop. ``run()`` returns the process exit code.

    ``clock`` (default: the system clock) is the time every wall, wait and backoff of the
    run reads; ``launcher`` (default: real process groups) starts each agent attempt."""

    def __init__(self, paths: NodePaths, options: RunOptions, reporter: Reporter, *,
                 clock: Clock | None = None, launcher: Launcher | None = None) -> None:
        self.paths = paths
        self.options = options
        self.reporter = reporter
        self.clock: Clock = clock or SystemClock()
        self.launcher: Launcher = launcher or ProcessLauncher()
        self.ledger = Ledger(paths.tree.db_path)
        self.waker = Waker(self.clock, before_wait=reporter.release)  # no text held in a wait
        self.state: RunState | None = None
        self.steering: Steering | None = None
        self.crash: str | None = None  # the reason recorded when the loop itself failed
        self.own_process = True
        self.db_lost = False  # the database refused even the park: write nothing more

    def run(self, *, own_process: bool = True) -> int:
        """Boot, run iterations until the run ends (or parks), finalize. Never raises.

        ``own_process`` (the pane's supervisor) also installs the signal handlers, makes
        this process the subreaper of what it starts, watches ``<node_dir>/.wake`` (and
        listens on the tree's wake channel on a PostgreSQL ledger),
        freezes its boot heap (``heap``) and exports the launch environment; an
        in-process run (a test) does none of that."""
        node = self.paths.branch
        resume = self.options.resume_mode
        expected = Status.PAUSED if resume else Status.IDLE
        pid = os.getpid()
        taken = self.ledger.move(node, Move.RESUME if resume else Move.START,
                                 supervisor=(pid, processes.process_create_time(pid)))
        if not taken.ok and not taken_for(self.ledger, node, taken.before, pid):
            self.reporter.warning(f"node {node} is {taken.before or 'unregistered'}, "
                                  f"not {expected.value}; this supervisor will not run it")
            return 1
        self.own_process = own_process
        if own_process:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, raise_interrupted)
            processes.become_subreaper()
            self.waker.watch(self.paths.node_dir)
            self.waker.listen(self.paths.tree.db_path, self.paths.tree.root, node)
            heap.freeze_boot_heap()
        try:
            return self._run()
        except Park as exc:
            return self._park(exc.where)  # `during PLAN`: "paused"/"parked" said once
        except Interrupted as exc:
            self._interrupted(exc)
            return 128 + exc.signum
        except DatabaseLocked as exc:  # locked past the wait's bound: a park, not an exit
            self.db_lost = not park_locked(self.ledger, self.paths, self.state, self.reporter, exc)
            return 1
        except Exception as exc:
            log.exception("supervisor crashed")
            self.crash = clip_reason(f"{ABNORMAL_EXIT}: {type(exc).__name__}: {exc}")
            self.reporter.warning(f"supervisor crashed: {type(exc).__name__}: {exc}")
            self._save_on_crash()
            return 1
        finally:
            self._on_exit()

    def _run(self) -> int:
        launch_env = launch_environment(self.paths, adopt=self.own_process)
        if self.own_process:
            sandboxing.arm(self.paths, launch_env, self.reporter.warning)  # sandbox, relay
        config, problem = read_boot_config(self.paths)
        if self.options.resume_mode:
            return self._resume(config, problem, launch_env)
        parent = parent_of(self.paths.branch)
        parent_run = self.ledger.active_run_id(parent) if parent else None
        run_id = self.ledger.open_run(self.paths.branch, agent=self._agent_of(config),
                                      max_cost=config.max_cost if config else None,
                                      parent_run_id=parent_run)
        self.reporter.banner_open(f"Run {run_id} of {self.paths.branch} at {self._now()}",
                                  major=True)
        self.state = RunState(run_id=run_id, live=config) if config else None
        try:
            if config is None:
                raise RunAbort(problem)
            boot = preflight(self.paths, self.options, config, launch_env,
                             self.reporter.warning)
        except RunAbort as exc:
            return self._abort(run_id, str(exc))
        assert self.state is not None
        state = self.state
        state.gates = held_gates(self.ledger, self.paths.branch, self.paths.steps_dir, run_id,
                                 resumed=False)
        if boot.run_timeout is not None:
            state.run_deadline = self.clock.monotonic() + boot.run_timeout
        return self._loop(boot, state)

    def _now(self) -> str:
        """The clock's wall time as ``YYYY-MM-DDTHH:MM:SSZ`` (for the pane's banners)."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.time()))

    def _loop(self, boot: Boot, state: RunState) -> int:
        """Build the run's loop from its parts, run it, and finalize."""
        steering = Steering(self.ledger, state.run_id)
        self.steering = steering
        braked = brake_reason(self.paths, self.ledger, fresh=not self.options.resume_mode)
        if braked is not None:
            raise Park(braked)
        budget = BudgetGuard(boot, state, self.ledger, self.reporter, self.clock)
        loop = RunLoop(LoopParts(boot, state, self.ledger, self.reporter, self.waker, steering,
                                 self.clock, self.launcher, budget))
        try:
            loop.run()
        except RunAbort as exc:
            return self._abort(state.run_id, str(exc))
        self._finalize(loop)
        return 0

    def _resume(self, config: NodeConfig | None, problem: str, launch_env: dict[str, str]) -> int:
        """Adopt the parked run: same run id, iteration count and budgets; the open
        iteration is re-entered at its interrupted step, and the parked time (and the waits'
        time before the park) is credited back to the run and iteration walls. A preflight failure parks it again, so a fixed
        environment can resume once more; with no open run to adopt the node exits (no
        notice: no run)."""
        plan = adopt(self.ledger, self.paths.branch, self.paths.session_path)
        if plan is None:
            self.reporter.warning("no parked run to resume")
            self.ledger.move(self.paths.branch, Move.ABORT, reason="no parked run to resume")
            return 1
        self.reporter.banner_open(f"Run {plan.run_id} of {self.paths.branch} resumed at "
                                  f"{self._now()}", major=True)
        Steering(self.ledger, plan.run_id).clear_pause()
        cut = end_parked_waits(self.ledger, self.paths.branch, plan.run_id)  # an outage's: cut
        if config is None:
            raise Park(f"again: {problem}")
        state = RunState(run_id=plan.run_id, live=config, iteration=plan.iteration,
                         sessions=dict(plan.sessions))
        from fractal.runtime.checkrestore import restore_track  # deferred: a resume's only
        state.checks = restore_track(self.paths.tree.db_path, self.paths.branch, plan.run_id,
                                     config.no_progress,  # the check diagnostics, the streak
                                     ScoreRules(config.pass_score, config.min_gain,
                                                config.stagnation))
        state.fail_streak = self._fail_streak(plan.run_id)
        state.gates = held_gates(self.ledger, self.paths.branch, self.paths.steps_dir,
                                 plan.run_id, resumed=True)
        self.state = state
        try:
            boot = preflight(self.paths, self.options, config, launch_env,
                             self.reporter.warning)
        except RunAbort as exc:
            self.reporter.warning(f"cannot resume: {exc}")
            raise Park(f"again: {exc}") from None
        if cut:
            boot = replace(boot, outage_cut=True)
        self._reenter_session(plan.iter_id, plan.resume_position, boot, state)
        now, mono = self.clock.time(), self.clock.monotonic()
        run_end = credited_deadline(plan.run_started, boot.run_timeout, plan.waited
                                    + paused_seconds(plan.spans, plan.run_started, now))
        state.run_deadline = None if run_end is None else mono + (run_end - now)
        if plan.iter_id is not None and plan.iter_started is not None:
            state.iter_id = plan.iter_id  # a park before the re-entry still names it
            iter_end = credited_deadline(plan.iter_started, boot.iter_timeout or boot.interval,
                                         plan.iter_waited
                                         + paused_seconds(plan.spans, plan.iter_started, now))
            state.reentry = Reentry(
                iter_id=plan.iter_id, position=plan.resume_position,
                gate=plan.pending_gate.step_id if plan.pending_gate else None,
                started=mono - (now - plan.iter_started),
                timestamp=format_ts(datetime.fromtimestamp(plan.iter_started, UTC)),
                deadline=None if iter_end is None else mono + (iter_end - now))
        return self._loop(boot, state)

    def _reenter_session(self, iter_id: int | None, position: int, boot: Boot,
                         state: RunState) -> None:
        """A step an interruption cut short (its row ``paused``, ``interrupted: ...``) is
        re-entered with the agent session it had opened, when the saved session map has
        none for the node's agent (an interruption cannot save the map mid-launch)."""
        if iter_id is None or boot.detached:
            return
        cut = [r for r in self.ledger.steps_of_iteration(iter_id)
               if r.step == position and r.step_name != "SYNC" and r.session
               and r.status is Status.PAUSED and r.meta.startswith("interrupted:")]
        if cut and cut[-1].session:
            state.sessions.setdefault(boot.agent_setting, cut[-1].session)

    def _fail_streak(self, run_id: int) -> FailStreak:
        """The failed iterations in a row at the end of run ``run_id`` (a resume keeps
        counting where the parked run left off)."""
        streak = FailStreak()
        for row in self.ledger.iterations_of(run_id):
            if row.ended_at is not None:
                streak = advance_failures(streak, row.status is Status.FAILED, row.meta)
        return streak

    def _agent_of(self, config: NodeConfig | None) -> str | None:
        """The agent setting the run uses: the node's, else the tree's default."""
        if config is not None and config.agent:
            return config.agent
        value = self.paths.tree.root_config().get("agent")
        return value if isinstance(value, str) else None

    def _park(self, where: str) -> int:
        """Park the run (a pause is not an end): rows stay open, nothing is committed, the
        node is ``paused`` and its ``pause`` event written in one move, the pane exits."""
        state = self.state
        if state is not None:
            save_sessions(self.paths.session_path, state.sessions)
        run = self.ledger.open_run_of(self.paths.branch)
        parked = self.ledger.move(self.paths.branch, Move.PARK, event=EventNote(
            "pause", actor="loop", metadata=f"parked {where}"[:250],
            run_id=run.run_id if run else None, iter_id=state.iter_id if state else None))
        if not parked.ok:
            self.reporter.warning(f"cannot park the run: {parked.why}")
            return 1
        self.reporter.banner_open(f"Run paused {where}; `fractal node resume "
                                  f"{self.paths.branch}` continues it", major=True)
        return 0

    def _abort(self, run_id: int, reason: str) -> int:
        """The run cannot go on: one move closes every open row ``exited``/1 with
        ``reason``, posts the exit notice and settles the node ``exited``."""
        reason = clip_reason(reason)
        self.reporter.warning(f"run {run_id} cannot go on: {reason}")
        self.ledger.move(self.paths.branch, Move.ABORT, reason=reason)
        return 1

    def _finalize(self, loop: RunLoop) -> None:
        state, guard = loop.state, loop.budget
        if state.iteration:
            backstop(self.paths.worktree,
                     f"{self.paths.branch}: iteration {state.run_id}.{state.iteration} (final)",
                     "", self.reporter, branch=self.paths.branch)
        end, land = loop.verdict()  # a budget landing, or a finish's overshoot in its wind-down
        if land.note is not None:
            end = replace(end, reason=clip_reason(f"{end.reason}; {land.note}"))
        self._close(state.run_id, end, guard.figures())

    def _close(self, run_id: int, end: RunEnd, figures: str = "") -> None:
        """Close the run with the matrix's verdict: the run row, its end notice (status,
        reason and spend; ``figures``: a capped run's budget figures) and the node's
        status, one move. A finish that ended an unapproved gate says so in the reason;
        descendants still running get an outbox notice naming them, a hand-back not
        merged again is named in the reason (``ends.unmerged_reason``), and a ``completed``
        end books the subtree's work never merged (``ends.record_unmerged``); once closed, an
        ancestor whose booked fact named this node still running has it booked again
        (``ends.refresh_unmerged_above``)."""
        end = replace(end, reason=clip_reason(unmerged_reason(
            self.ledger, self.paths,
            finish_reason(self.ledger, self.paths.branch, run_id, end.reason))))
        notify_unsettled(self.ledger, self.paths.branch)
        if end.run_status is Status.COMPLETED:
            record_unmerged(self.ledger, self.paths, run_id)
        notice = run_end_draft(self.ledger, run_id, end.run_status.value, end.reason, figures)
        closed = self.ledger.move(self.paths.branch, Move.END, to=end.node_status,
                                  run_id=run_id, exit_code=end.exit_code, reason=end.reason,
                                  figures=figures, notice=notice)
        if not closed.ok:
            self.reporter.warning(f"cannot close run {run_id}: {closed.why}")
            return
        refresh_unmerged_above(self.ledger, self.paths)
        self.reporter.banner_open(f"Run {run_id} {end.run_status.value} (exit {end.exit_code}): "
                                  f"{end.reason}", major=True)

    def _interrupted(self, exc: Interrupted) -> None:
        """The supervisor lost its host (SIGHUP or SIGTERM from a dying tmux session or
        server, a logout, a shutdown; SIGINT from the pane). A kill verb's signal closes
        the run ``killed``; any other parks it as a pause does, in one INTERRUPT move:
        every open step closes ``paused`` with ``interrupted: <SIGNAL>``, the run and
        iteration stay open, nothing is committed (a gate's unapproved work neither), the
        node is ``paused`` and ``fractal resume`` continues it. The agent groups are ended
        by the exit sweep. Before a run is open, the exit's ABORT ends the node instead."""
        name = signal.Signals(exc.signum).name
        state = self.state
        killed = self.steering.killed() if self.steering is not None else None
        if killed is not None:  # `fractal node kill`: close as killed, commit nothing
            self.reporter.warning(f"{killed}; closing the run")
            self.ledger.close_open(self.paths.branch, Status.KILLED.value, killed)
            return
        run = self.ledger.open_run_of(self.paths.branch)
        if run is None:
            return  # nothing to park: the exit's ABORT settles the node
        reason = f"interrupted: {name}"
        self.reporter.warning(f"received {name}; parking the run (nothing committed)")
        if state is not None:
            save_sessions(self.paths.session_path, state.sessions)
            if state.held_gate is not None:  # still unapproved: a resume waits again
                self.ledger.park_step(state.held_gate, self.paths.branch, 0,
                                      f"{AWAITING_APPROVAL}; {reason}")
        parked = self.ledger.move(self.paths.branch, Move.INTERRUPT, reason=reason,
                                  exit_code=128 + exc.signum, event=EventNote(
                                      "pause", actor="loop", metadata=f"parked {reason}",
                                      run_id=run.run_id,
                                      iter_id=state.iter_id if state else None),
                                  notice=(f"run {run.run_id} parked: {reason}",
                                          f"The supervisor of {self.paths.branch} received "
                                          f"{name}. `fractal resume` continues the run."))
        if not parked.ok:
            self.reporter.warning(f"cannot park the run: {parked.why}")

    def _save_on_crash(self) -> None:
        """After a crash of the loop itself, still commit what the agent left."""
        state = self.state
        if state is None or not state.iteration:
            return
        try:
            backstop(self.paths.worktree,
                     f"{self.paths.branch}: iteration {state.run_id}.{state.iteration} (crashed)",
                     self.crash or "", self.reporter, branch=self.paths.branch)
        except Exception:
            log.exception("could not commit after the crash")

    def _on_exit(self) -> None:
        node = self.paths.branch
        self.reporter.release()
        sandboxing.disarm()
        try:  # whatever the loop still has running would outlive it as an orphan: e.g. an
            # agent spawned the instant a SIGHUP arrived, before its group was recorded
            left = processes.sweep_descendants(grace=processes.grace(processes.Reap.EXIT))
            if left:
                log.warning("processes still alive after the exit sweep: %s", left)
        except Exception:
            log.exception("could not sweep the loop's leftover processes")
        try:
            self.waker.close()
            if self.db_lost:
                return  # left active with no supervisor: the next read's heal parks the run
            # Still active: the loop ended without closing its run (refused otherwise).
            self.ledger.move(node, Move.ABORT, reason=self.crash or ABNORMAL_EXIT)
            self.ledger.set_supervisor(node, None, None)
            self.ledger.checkpoint()
        except Exception:
            log.exception("could not close the run cleanly")
