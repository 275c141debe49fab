"""The iteration loop of one run, with its signal checkpoints, pacing and finish drains.

Between iterations the loop checks, in order: the budget boundary, the pending signals
(pause parks, finish drains the children then ends the run, stop ends it, the node's own
``done`` ends it ``completed`` with the node's reason), the run wall
and ``max_iters``. After each iteration it counts crash loops (setup or step discovery
failing CRASH_LOOP times in a row ends the run), runs the exit check, and paces the next
iteration (``interval`` from the last start, or ``sleep`` after the last end, never past
the run wall, cut short by any signal). ``max_failed_iters`` failed iterations in a row
end the run ``exited`` (``domain.run.failstreak``); a park is not an iteration outcome and
leaves the count as it was. The facts it leaves in ``RunState`` decide the
run's end (``domain.run.outcome.decide_run_end``, through ``RunLoop.verdict``).

A run about to end ``completed`` while a child holds a hand-back the node has not merged
again (``runtime.digest.unmerged_hand_backs``) first waits for that re-merge, as a
``wait: children`` step waits: a SYNC every ``wait`` window when the tree holds news,
and at once when a handed-back child settles (so the agent merges it again then),
bounded by the run wall (then the run ends timed out, its reason naming the child), a
stop ends it stopped, a pause parks it (a resume waits again). A ``node done`` the agent
runs during the wait (once it merged the child) gives the run its reason when the wait
ends; it does not end the wait before the merge. Any other end does not wait; its reason
names the child too (the supervisor's ``ends.unmerged_reason``).
"""

from __future__ import annotations

from dataclasses import replace

from fractal.domain.budget.ceilings import Landing
from fractal.domain.errors import FractalError
from fractal.domain.run.failstreak import advance_failures, failures_reason
from fractal.domain.run.outcome import RunEnd, RunFacts, Status, decide_run_end
from fractal.domain.run.walls import pacing_delay, time_budget_label
from fractal.domain.signals import Signal
from fractal.domain.states import SETTLED
from fractal.runtime import heap
from fractal.runtime.checks import CheckRunner, CheckVerdict
from fractal.runtime.filecache import FILES, live_config
from fractal.runtime.gates import WaitEnd, await_hand_backs, drain_children
from fractal.runtime.iteration import IterationResult, IterationRunner
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.scoring import score_distance
from fractal.runtime.steering import Park

CRASH_LOOP = 3  # consecutive setup (or discovery) failures that end a run


class RunLoop(LoopPart):
    """Iterates until the run ends; leaves the facts in ``state``. Raises Park, RunAbort."""

    def __init__(self, parts: LoopParts) -> None:
        super().__init__(parts)
        self.runner = IterationRunner(parts)
        self.checks = CheckRunner(parts)

    def run(self) -> None:
        """Run iterations until max_iters, the run wall, a stop, a finish, the budget, the
        exit check or a crash loop ends the run; an end that would be ``completed`` first
        waits for the re-merge of the children's hand-backs. A resume re-enters
        ``state.reentry`` first, without the checks at an iteration's top (it is not a new
        iteration)."""
        while True:
            heap.iteration_top()  # the collection itself runs at the first launch
            self.refresh_live()
            if self.state.reentry is None and self._ends_at_top():
                break
            if self._ends_after(self.runner.run()):
                break
            self._pace()
        self._hold_for_hand_backs()

    def facts(self) -> RunFacts:
        """The facts the run's end is decided by, as ``state`` holds them now (no budget
        landing: ``verdict`` adds it)."""
        boot, state = self.boot, self.state
        return RunFacts(
            run_id=state.run_id, last_iter=state.iteration, max_iters=state.live.max_iters,
            budget_reason=None, setup_aborted=state.setup_failures >= CRASH_LOOP,
            setup_failures=state.setup_failures,
            finish_drained=state.finish_drained, timed_out=state.timed_out,
            walls_label=time_budget_label(boot.run_timeout, boot.iter_timeout,
                                          state.live.step_timeout),
            stopped=state.stopped, last_iter_ok=state.last_iter_ok,
            crash_reason=state.crash_reason, exit_check_passed=state.checks.passed,
            no_progress=state.checks.stalled, stagnation=state.checks.stagnant,
            score_note=score_distance(boot.paths.worktree, state.checks),
            step_end=state.step_end, done=state.done)

    def verdict(self) -> tuple[RunEnd, Landing]:
        """How the run would end now (``domain.run.outcome.decide_run_end`` over ``facts`` and
        the budget's landing), and that landing (its ``note`` is the caller's to add)."""
        land = self.budget.landing()
        return decide_run_end(replace(self.facts(), budget_reason=land.reason)), land

    def _hold_for_hand_backs(self) -> None:
        """Wait for the children's hand-backs to be merged again before a ``completed``
        end (the module docstring); any other end, or none pending, passes at once."""
        # deferred: a run's end: start-up cost (3 modules)
        from fractal.runtime.digest import unmerged_hand_backs

        paths, state = self.boot.paths, self.state
        try:
            pending = unmerged_hand_backs(self.ledger, paths)
        except FractalError:
            return  # an unreadable registry: the end's reason cannot name them either
        if not pending or self.verdict()[0].run_status is not Status.COMPLETED:
            return
        self.runner.leave_iteration()
        what = f"waiting for the re-merge of {', '.join(pending)}"
        banner, started = f"WAIT ({what})", self.clock.monotonic()
        self.reporter.banner_open(banner)
        self.reporter.notice(f"hand-back of {', '.join(pending)} not merged yet; the run "
                             "ends once it is (`fractal node merge` of the settled child)")
        sync, node_md = self.runner.kit.sync, self.runner.node_md()
        def settled() -> set[str]:  # the handed-back children a merge may take now
            statuses = {r.node: r.status for r in self.ledger.nodes()}
            return {b for b in unmerged_hand_backs(self.ledger, paths)
                    if statuses.get(b) in SETTLED}

        end = await_hand_backs(lambda: unmerged_hand_backs(self.ledger, paths),
                               settled=settled, steering=self.steering, waker=self.waker,
                               deadline=lambda: state.run_deadline,
                               window=float(state.live.wait),
                               sync=(lambda: sync.while_waiting(None, node_md, what=what))
                               if self.boot.sync else None)
        self.reporter.banner_close(banner, end.value, self.clock.monotonic() - started)
        if end is WaitEnd.PAUSED:
            raise Park(f"while {what}")
        if end is WaitEnd.RELEASED and state.done is None:
            state.done = self.steering.done_reason()  # a SYNC's ``node done`` after the merge
        if end is WaitEnd.TIMED_OUT:
            state.timed_out = True
        elif end is WaitEnd.STOPPED:
            ending = self.runner.kit.usage.ending  # a SYNC's usage-window wait ended it
            if ending is not None:
                state.step_end = ending
            else:
                state.stopped = True

    def _ends_at_top(self) -> bool:
        """The checks before a new iteration, in order: the budget boundary (the run winds
        down), a pending signal, the run wall, max_iters. True when the run ends here."""
        if self.budget.iteration_top():
            self._wind_down()
            return True
        return self._checkpoint(allow_finish=True) or self._gates_closed()

    def _ends_after(self, result: IterationResult) -> bool:
        """Fold the iteration's ``result`` into the run's facts, then the checks after it:
        a stop or finish it took, a crash loop, the exit check, the budget boundary, a
        pending signal. True when the run ends here."""
        state = self.state
        state.last_iter_ok = result.ok
        if result.ending is not None:  # a step kind ended the run (a pool, a usage window)
            state.step_end = result.ending
            return True
        if result.stopped:
            state.stopped = True
            return True
        if result.finished:  # the approval wait took the finish: a later --cancel
            if self._drain():  # cannot undo the iteration it already cut short
                state.finish_drained = True
            return True
        if self._crash_loop(result):
            return True
        verdict = self.checks.exit_check(steps_ran=not (result.setup_failed
                                                         or result.discovery_failed))
        if verdict is CheckVerdict.PASSED:
            return True  # a passed exit check outranks every other end (domain.run.stopcause)
        if verdict is CheckVerdict.FAILED:
            state.last_iter_ok = False  # the node's own test of done is still red
        if verdict is CheckVerdict.STALLED:
            self._checkpoint(allow_finish=True)  # a stop or finish outranks no progress
            return True
        if self._failing(result):
            return True
        if self.budget.at_boundary():
            self._wind_down()
            return True
        return self._checkpoint(allow_finish=True)

    def _crash_loop(self, result: IterationResult) -> bool:
        """Count failed setups and failed step discoveries in a row; CRASH_LOOP of either
        ends the run (a discovery loop names its reason, ``<reason> x3``)."""
        state = self.state
        state.setup_failures = state.setup_failures + 1 if result.setup_failed else 0
        state.discovery_failures = (state.discovery_failures + 1
                                    if result.discovery_failed else 0)
        if state.discovery_failures >= CRASH_LOOP:
            state.crash_reason = f"{result.reason.split(':')[0]} x{CRASH_LOOP}"
        return state.setup_failures >= CRASH_LOOP or state.discovery_failures >= CRASH_LOOP

    def _failing(self, result: IterationResult) -> bool:
        """Count failed iterations in a row (any other outcome restarts the count);
        ``max_failed_iters`` of them end the run with
        ``N consecutive iterations failed (last: <reason>)``."""
        state = self.state
        state.fail_streak = advance_failures(state.fail_streak, not result.ok, result.reason)
        reason = failures_reason(state.fail_streak, state.live.max_failed_iters)
        if reason is None:
            return False
        state.crash_reason = reason
        return True

    def refresh_live(self) -> None:
        """Re-read config.json (parsed again only when it changed: ``FILES``); a malformed
        edit warns and keeps the previous values."""
        try:
            self.state.live = FILES.get(self.boot.paths.config_path, live_config)
        except (FractalError, OSError) as exc:
            self.reporter.warning(f"config.json edit ignored, keeping the previous values: {exc}")

    def _gates_closed(self) -> bool:
        """The max_iters and run-wall gates at the top of an iteration."""
        state = self.state
        if state.run_deadline is not None and self.clock.monotonic() >= state.run_deadline:
            state.timed_out = True  # the run wall outranks max_iters
            return True
        return state.live.max_iters is not None and state.iteration >= state.live.max_iters
        return False

    def _checkpoint(self, *, allow_finish: bool) -> bool:
        """Act on a pending signal between iterations: pause parks (raises Park), finish
        drains the children then ends the run, stop ends it, the node's own done ends it
        (no drain: its children are its to settle first). True when the run ends."""
        signal = self.steering.check(allow_finish=allow_finish)
        if signal is Signal.PAUSE:
            raise Park("between iterations")
        if signal is Signal.FINISH:
            if self._drain():
                self.state.finish_drained = True
            return True
        if signal is Signal.STOP:
            self.state.stopped = True
            return True
        if signal is Signal.DONE:
            self.state.done = self.steering.done_reason() or ""
            return True
        return False

    def _wind_down(self) -> None:
        """A budget bound ended the run (the subtree got a finish): a pending pause still
        parks; otherwise wait for the children, then end."""
        if self.steering.check(allow_finish=False, allow_stop=False) is Signal.PAUSE:
            raise Park("between iterations")
        if self._drain():
            self.state.finish_drained = True

    def _drain(self) -> bool:
        """Wait for the children before a finish ends the run (run wall only, no SYNC:
        no iteration is open). False when a stop cut it short (the run ends stopped)."""
        end = drain_children(self.ledger, self.boot.paths.branch, steering=self.steering,
                             waker=self.waker, deadline=self.state.run_deadline,
                             window=float(self.state.live.wait), sync=None)
        if end is WaitEnd.PAUSED:
            raise Park("while draining children")
        if end is WaitEnd.TIMED_OUT:
            self.state.timed_out = True
        if end is WaitEnd.STOPPED:
            self.state.stopped = True
            return False
        return True

    def _pace(self) -> None:
        """Sleep before the next iteration (interval or sleep), never past the run wall,
        waking for signals; a signal cuts the sleep short (the top checkpoint acts)."""
        state = self.state
        clock = self.clock
        delay = pacing_delay(clock.monotonic(), state.iter_started, self.boot.interval,
                             self.boot.sleep, state.run_deadline)
        if delay <= 0:
            return
        self.reporter.notice(f"sleeping {round(delay)}s before the next iteration")
        end = clock.monotonic() + delay
        while (left := end - clock.monotonic()) > 0:
            if self.steering.check() is not None:
                return
            self.waker.wait(left, poll=self.waker.idle_poll)
