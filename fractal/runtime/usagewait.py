"""The usage-window wait: a step stopped by a closed subscription window is not a
failure; the run waits in its supervisor until the window reopens, then the step is
re-entered with its session.

The wait is a wait point on the run's clock like the others: a pause parks the run, a
stop or a finish ends it at once (a kill signal interrupts it as any wait), and the
waited time is credited to the run and iteration walls (it is not an iteration and no
retry is spent). ``on_usage_limit: stop`` ends the run ``stopped`` with the limit's
reason instead of waiting; a wait longer than ``max_usage_wait`` ends the run ``exited``
(``usage window did not reopen within 12h``). A notice goes to the node's outbox when a
wait starts and when it ends, and a ``usage_wait`` event (``started`` while waiting)
gives ``fractal node status`` its ``active (waiting for usage window until 14:05Z)``.
"""

from __future__ import annotations

import time

from fractal.agents.base import WindowEvent
from fractal.domain.outcome import RunEnd, StepOutcome
from fractal.domain.signals import Signal
from fractal.domain.states import Status
from fractal.domain.usage import UsageLimit, limit_reason, next_wake, over_wait_reason
from fractal.runtime.context import LoopPart
from fractal.runtime.steering import Park

WAIT_EVENT = "usage_wait"
"""The event a usage-window wait writes: ``started`` when it begins, ``completed`` at its end."""


def hhmm(instant: float) -> str:
    """``14:05Z``: the UTC clock time of an epoch instant."""
    return time.strftime("%H:%MZ", time.gmtime(instant))


class UsageWait(LoopPart):
    """Waits out a closed usage window for the run in ``state``."""

    def wait_out(self, window: WindowEvent, step_name: str) -> StepOutcome | None:
        """Wait until the window reopens (its stated reset plus a jitter, else a bounded
        backoff). None: the window reopened, re-enter the step. A StepOutcome (status
        ``stopped``) when the run ends instead: ``state.usage_end`` then says how, or a
        stop/finish did (``state.stopped`` / the caller's finish). Raises Park on a pause.
        """
        state, live = self.state, self.state.live
        limit = UsageLimit(window.window, window.resets_at)
        reason = limit_reason(limit)
        node = self.boot.paths.branch
        if live.on_usage_limit == "stop":
            state.usage_end = RunEnd(Status.STOPPED, Status.STOPPED, 0, reason)
            return StepOutcome(Status.STOPPED, 0, reason)
        now, mono = self.clock.time(), self.clock.monotonic()
        until = next_wake(limit.resets_at, now)
        give_up = now + live.max_usage_wait
        shown = f"waiting for usage window until {hhmm(until)}"
        self.reporter.notice(f"{step_name}: {reason}; {shown}")
        self.ledger.post_notice(node, f"{shown} ({limit.window})",
                                f"{step_name} stopped: {reason}. The run waits and "
                                f"re-enters the step at the reset.")
        self.ledger.add_event(node, WAIT_EVENT, actor="loop", status="started",
                              metadata=shown, run_id=state.run_id, iter_id=state.iter_id)
        try:
            ended = self._wait(until, give_up)
        finally:
            self._credit(self.clock.monotonic() - mono)
        if ended is not None:
            self._close_event(node, f"ended: {ended.reason}")
            return ended
        self._close_event(node, "usage window reopened")
        self.ledger.post_notice(node, f"usage window reopened ({limit.window})",
                                f"re-entering {step_name}")
        return None

    def _wait(self, until: float, give_up: float) -> StepOutcome | None:
        """Block until ``until`` (epoch s), acting on signals at every wake."""
        while (now := self.clock.time()) < until:
            if now >= give_up:
                reason = over_wait_reason(self.state.live.max_usage_wait)
                self.state.usage_end = RunEnd(Status.EXITED, Status.EXITED, 1, reason)
                return StepOutcome(Status.STOPPED, 0, reason)
            signal = self.steering.check(allow_finish=True)
            if signal is Signal.PAUSE:
                raise Park("while waiting for the usage window")
            if signal is Signal.FINISH:
                return StepOutcome(Status.STOPPED, 0, "finish requested waiting for the "
                                   "usage window")
            if signal is Signal.STOP:
                return StepOutcome(Status.STOPPED, 0, "stopped waiting for the usage window")
            self.waker.wait(min(until, give_up) - now)
        return None

    def _credit(self, waited: float) -> None:
        """The waited seconds do not count against the run and iteration walls."""
        state = self.state
        if state.run_deadline is not None:
            state.run_deadline += waited
        if state.iter_deadline is not None:
            state.iter_deadline += waited

    def _close_event(self, node: str, how: str) -> None:
        self.ledger.add_event(node, WAIT_EVENT, actor="loop", status="completed",
                              metadata=how, run_id=self.state.run_id,
                              iter_id=self.state.iter_id)
