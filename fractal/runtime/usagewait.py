"""The usage-window wait: a step stopped by a closed subscription window is not a
failure; the run waits in its supervisor until the window reopens, then the step is
re-entered with its session.

The wait is a wait point on the run's clock like the others: a pause parks the run, a
stop or a finish ends it at once (a kill signal interrupts it as any wait), and the
waited time is credited to the run and iteration walls (it is not an iteration and no
retry is spent). ``on_usage_limit: stop`` ends the run ``stopped`` with the limit's
reason instead of waiting; a wait known to end more than ``max_usage_wait`` ahead is
refused before it starts (``domain.usage.windows.wait_refusal``) and one that lasts longer than
that ends the run ``exited`` (``usage window did not reopen within 12h``). A notice goes to the node's outbox when a
wait starts and when it ends, and a ``usage_wait`` event (``started`` while waiting)
gives ``fractal node status`` its ``active (waiting for usage window until 14:05:05Z)``
(with the date when the wait ends on another day: ``domain.usage.windows.until_label``).

Tree-wide, per credential (``domain.usage.windows.launch_credential``): the node that hits the
window writes its ``usage_windows`` row; every node on that credential reads the row
before each launch and waits too instead of calling the API. At the wake instant exactly
one node claims the probe (a compare-and-set); its launch reopens the window when it
gets through, or closes it again with a longer backoff when it does not. The others
launch once the window is open, a few at a time (``domain.usage.windows.decide``).
"""

from __future__ import annotations

import os

from fractal.agents.base import WindowEvent
from fractal.domain.run.outcome import RunEnd, StepOutcome
from fractal.domain.states import Status
from fractal.domain.usage.windows import (
    PROBE_POLL,
    RESUME_JITTER,
    Action,
    UsageLimit,
    WindowState,
    decide,
    launch_credential,
    limit_reason,
    over_wait_reason,
    until_label,
    wait_refusal,
)
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.steering import Park, wait_signal
from fractal.runtime.waitcredit import credit_wait
from fractal.store.ledger import Ledger
from fractal.store.windows import Windows

USAGE_POLL = 10.0
"""Seconds between two database looks of a usage-window wait: every verb that acts on it
touches the wake file (a kill signals the process), so the wait is woken at once anyway
and its supervisor stays idle (well under 0.1 % of a core)."""
JITTER_ENV = "FRACTAL_RESUME_JITTER_S"
"""Overrides ``RESUME_JITTER``, the seconds past a stated reset before the probe launches
(0 to 60; anything else keeps the default). Read from the run's launch environment."""
PROBE_POLL_ENV = "FRACTAL_PROBE_POLL_S"
"""Overrides ``PROBE_POLL``, the seconds between two looks of a node waiting on another
node's probe (0.1 to 60; anything else keeps the default). Read as ``JITTER_ENV`` is."""
WAIT_EVENT = "usage_wait"
"""The event a usage-window wait writes: ``started`` when it begins, ``completed`` at its end."""


def end_parked_wait(ledger: Ledger, node: str, run_id: int) -> None:
    """A resume adopts a run whose usage-window wait was parked (a pause, an interruption,
    a heal): close that wait's ``usage_wait`` event, so ``node status`` stops showing it;
    the resumed step waits again (a new event) only if its window is still closed."""
    events = ledger.events_of(node, run_id, (WAIT_EVENT,))
    if events and events[-1].status == "started":
        ledger.add_event(node, WAIT_EVENT, actor="loop", status="completed",
                         metadata="ended: parked", run_id=run_id)


class UsageWait(LoopPart):
    """Waits out a closed usage window for the run in ``state``: one per run, shared by
    every launch of it (steps, SYNC, fix rounds), and the one writer of its two facts.

    ``probing`` is the credential whose reopened window this node's next launch probes
    (None: none); ``ending`` is how a wait ended the run (``on_usage_limit: stop``, past
    ``max_usage_wait``; None: it did not), carried to the run's end by the step results.
    """

    def __init__(self, parts: LoopParts) -> None:
        super().__init__(parts)
        self.probing: str | None = None
        self.ending: RunEnd | None = None

    @property
    def credential(self) -> str:
        """The fingerprint of the credential this node's launches use."""
        boot = self.boot
        return launch_credential(boot.backend.name, boot.launch_env or os.environ,
                                 boot.provider)

    def _seconds(self, var: str, default: float, least: float) -> float:
        """``var`` of the launch environment as seconds from ``least`` to 60; ``default``
        when it is unset, not a number or out of that range."""
        try:
            value = float((self.boot.launch_env or os.environ).get(var, default))
        except ValueError:
            return default
        return value if least <= value <= 60.0 else default

    @property
    def jitter(self) -> float:
        """Seconds past a stated reset before the probe launches (``JITTER_ENV``)."""
        return self._seconds(JITTER_ENV, RESUME_JITTER, 0.0)

    @property
    def probe_poll(self) -> float:
        """Seconds between two looks while another node probes (``PROBE_POLL_ENV``)."""
        return self._seconds(PROBE_POLL_ENV, PROBE_POLL, 0.1)

    def wait_out(self, window: WindowEvent, step_name: str,
                 step_id: int | None = None) -> StepOutcome | None:
        """This node's launch hit a closed window: record it for the credential, then
        wait as ``_hold`` does. None: the window reopened (or this node is its probe),
        re-enter the step. A StepOutcome (status ``stopped``) when the run ends instead:
        ``ending`` then says how, else a stop or a finish did (its reason says
        which). Raises Park on a pause.

        ``step_id`` is the limited launch's row, left open by the launch: it closes
        ``paused`` with the limit's reason when the step is re-entered or the wait parks,
        and ``stopped`` (exit 0, the end's reason) when the run ends instead, so no row
        of a closed run says ``paused``."""
        limit = UsageLimit(window.window, window.resets_at)
        reason = limit_reason(limit)
        self.probing = None
        if self.state.live.on_usage_limit == "stop":
            return self._close_row(step_id, reason, self._stop(reason))
        row = Windows(self.boot.paths.tree.db_path).close(
            self.credential, limit.window, limit.resets_at, self.boot.paths.branch,
            self.clock.time(), self.jitter)
        try:
            ended = self._hold(row.window, row.wake_at, f"{step_name}: {reason}",
                               row.resets_at)
        except Park:
            self._close_row(step_id, reason, None)
            raise
        return self._close_row(step_id, reason, ended)

    def _close_row(self, step_id: int | None, reason: str,
                   ended: StepOutcome | None) -> StepOutcome | None:
        """Close the limited launch's row (see ``wait_out``); returns ``ended``."""
        if step_id is not None:
            if ended is None:
                self.ledger.close_step(step_id, Status.PAUSED.value, None, reason)
            else:
                self.ledger.close_step(step_id, Status.STOPPED.value, 0, ended.reason)
        return ended

    def before_launch(self, step_name: str) -> StepOutcome | None:
        """At a step boundary: when the credential's window is closed (another node hit
        it) or being probed by another node, wait instead of calling the API. None:
        launch (as the probe when ``probing`` is set). As ``wait_out`` otherwise."""
        windows, credential = Windows(self.boot.paths.tree.db_path), self.credential
        row = windows.window(credential)
        if row is None or row.state is WindowState.OPEN or self.probing == credential:
            return None  # open, or this node holds the probe (a re-entered step)
        node, now = self.boot.paths.branch, self.clock.time()
        if decide(row, node, now).action is Action.PROBE and \
                windows.claim_probe(credential, node, now):
            self.probing = credential  # no wait to announce: launch as the probe
            return None
        reason = limit_reason(UsageLimit(row.window, row.resets_at))
        if self.state.live.on_usage_limit == "stop":
            return self._stop(reason)
        return self._hold(row.window, row.wake_at, f"another node found the {reason}",
                          row.resets_at)

    def after_launch(self, got_through: bool) -> None:
        """The probe's launch ended: reopen the window for everyone when it got through
        (a closed window was recorded by ``wait_out`` otherwise)."""
        if self.probing is None:
            return
        if got_through:
            windows, node = Windows(self.boot.paths.tree.db_path), self.boot.paths.branch
            row = windows.window(self.probing)
            if windows.reopen(self.probing, node, self.clock.time()):
                window = f" ({row.window})" if row is not None and row.window else ""
                self.ledger.post_notice(node, f"usage window reopened{window}",
                                        "the probe launch got through; launching again")
        self.probing = None

    def _stop(self, reason: str) -> StepOutcome:
        """``on_usage_limit: stop``: the run ends ``stopped`` with the limit's reason."""
        self.ending = RunEnd(Status.STOPPED, Status.STOPPED, 0, reason)
        return StepOutcome(Status.STOPPED, 0, reason)

    def _hold(self, window: str, wake_at: float, why: str,
              resets_at: float | None = None) -> StepOutcome | None:
        """Wait until the credential's window lets this node launch (see the module
        docstring), with the notices and the ``usage_wait`` event; the waited time is
        credited to the walls. A stated reset (``resets_at``) past ``max_usage_wait`` ends
        the run at once instead (``domain.usage.windows.wait_refusal``)."""
        state, node = self.state, self.boot.paths.branch
        now, mono = self.clock.time(), self.clock.monotonic()
        refused = wait_refusal(resets_at, wake_at, now, state.live.max_usage_wait,
                               self.credential)
        if refused is not None:
            self.reporter.notice(f"{why}; {refused}" if why else refused)
            self.ending = RunEnd(Status.EXITED, Status.EXITED, 1, refused)
            return StepOutcome(Status.STOPPED, 0, refused)
        shown = f"waiting for usage window until {until_label(wake_at, now)}"
        if why:
            self.reporter.notice(f"{why}; {shown}")
        self.ledger.post_notice(node, f"{shown} ({window})",
                                f"{why or 'the usage window is closed'}. The run waits and "
                                "launches again when the window reopens (credential "
                                f"{self.credential}: `fractal usage reopen {self.credential}` "
                                "makes it probe at once).")
        self.ledger.add_event(node, WAIT_EVENT, actor="loop", status="started",
                              metadata=shown, run_id=state.run_id, iter_id=state.iter_id)
        try:
            ended = self._wait(now + state.live.max_usage_wait)
        finally:
            self._credit(self.clock.monotonic() - mono)
        if ended is not None:
            self._close_event(node, f"ended: {ended.reason}")
            return ended
        if self.probing:  # its launch is the probe: the reopening is posted if it gets through
            self._close_event(node, "probing the usage window")
            return None
        self._close_event(node, "usage window reopened")
        self.ledger.post_notice(node, f"usage window reopened ({window})", "launching again")
        return None

    def _wait(self, give_up: float) -> StepOutcome | None:
        """Block until ``decide`` lets this node launch or probe, acting on signals at
        every wake; None when it may launch (``probing`` set when as the probe)."""
        windows = Windows(self.boot.paths.tree.db_path)
        credential, node, poll = self.credential, self.boot.paths.branch, self.probe_poll
        rank: int | None = None
        while True:
            now = self.clock.time()
            row = windows.window(credential)
            if row is not None and row.state is WindowState.OPEN and rank is None:
                rank = max(0, windows.release_slot(credential))
            decision = decide(row, node, now, rank or 0, poll)
            if decision.action is Action.LAUNCH:
                return None
            if decision.action is Action.PROBE:
                if windows.claim_probe(credential, node, now):
                    self.probing = credential
                    return None
                continue  # another node claimed it first: read the row again
            if now >= give_up:
                reason = over_wait_reason(self.state.live.max_usage_wait)
                self.ending = RunEnd(Status.EXITED, Status.EXITED, 1, reason)
                return StepOutcome(Status.STOPPED, 0, reason)
            ended = wait_signal(self.steering, "waiting for the usage window")
            if ended is not None:
                return ended
            until = decision.until if decision.until is not None else now + 1.0
            self.waker.wait(max(0.0, min(until, give_up) - now), poll=USAGE_POLL)

    def _credit(self, waited: float) -> None:
        """The waited seconds do not count against the run and iteration walls, now or
        after a resume (``waitcredit``)."""
        credit_wait(self.ledger, self.boot.paths.branch, self.state, waited)

    def _close_event(self, node: str, how: str) -> None:
        self.ledger.add_event(node, WAIT_EVENT, actor="loop", status="completed",
                              metadata=how, run_id=self.state.run_id,
                              iter_id=self.state.iter_id)
