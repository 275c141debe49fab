"""The provider-outage wait: a launch that failed with a transient API error (overloaded,
a 5xx, a 429 that is not a usage window, a refused or reset connection, a failed DNS
lookup) is not a failure of the step; the run waits in its supervisor with a doubling
back-off (``outage_backoff`` seconds first, at most ``max_outage_backoff``), then the step
is re-entered with its session. No retry is spent, no failed iteration is counted, and
the run never ends for it.

The wait is a wait point on the run's clock like the usage-window wait: a pause parks the
run (a resume then cuts the wait short: its first launch probes at once), a stop or a
finish ends it, and the waited time is credited to the run and iteration walls, also
across a park (``waitcredit``). An ``outage_wait`` event (``started`` while waiting,
metadata ``waiting out a provider outage (HTTP 529, attempt 4) until <UTC>``) gives
``node status`` and the inbox their line; a notice goes to the outbox when the wait
starts and when the outage is over.

Tree-wide, per credential (``domain.usage.windows.launch_credential``), as the usage window is:
the node whose launch failed records the outage (``store.outages``); every node on that
credential reads the row before each launch and waits too. At the wake instant exactly
one node claims the probe; its launch clears the outage when it gets through (the others
launch at their next look), or records the next attempt with a doubled back-off.

Entry points for the step runner: ``OutageWait.before_launch`` (wait while the
credential is down), ``OutageWait.after_launch`` (was the launch an outage?) and
``OutageWait.wait_out`` (then wait before re-entering the step).
"""

from __future__ import annotations

import os

from fractal.domain.run.outcome import StepOutcome
from fractal.domain.states import Status
from fractal.domain.usage.outage import (
    OUTAGE_EVENT,
    OutageAction,
    OutageRow,
    cut_short_hint,
    decide_outage,
    is_outage,
    outage_backoff,
    outage_detail,
    outage_label,
    outage_over_notice,
)
from fractal.domain.usage.windows import launch_credential
from fractal.runtime.launch import AttemptResult
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.steering import wait_signal
from fractal.runtime.usagewait import USAGE_POLL, end_parked_wait
from fractal.runtime.waitcredit import credit_wait
from fractal.store.ledger import Ledger
from fractal.store.outages import Outages

__all__ = ["OUTAGE_EVENT", "OutageWait", "end_parked_waits"]

OUTAGE_POLL = 5.0
"""Seconds between two looks of a node whose credential another node is probing."""


def end_parked_waits(ledger: Ledger, node: str, run_id: int) -> bool:
    """A resume adopts a run whose usage-window or provider-outage wait was parked: close
    that wait's event (``usagewait.end_parked_wait``, ``outage_wait``). True when an
    outage wait was parked (the resumed run then probes at once: a resume is how an
    operator cuts the wait short)."""
    end_parked_wait(ledger, node, run_id)
    events = ledger.events_of(node, run_id, (OUTAGE_EVENT,))
    if events and events[-1].status == "started":
        ledger.add_event(node, OUTAGE_EVENT, actor="loop", status="completed",
                         metadata="ended: parked", run_id=run_id)
        return True
    return False


class OutageWait(LoopPart):
    """Waits out a provider outage for the run in ``state``: one per run, shared by every
    launch of it (steps, SYNC, fix rounds), and the one writer of its two facts.

    ``probing`` is the credential whose outage this node's next launch probes (None:
    none); ``cut`` is set while a resume of a run parked in an outage wait has not yet
    launched (``Boot.outage_cut``): its first launch probes at once.
    """

    def __init__(self, parts: LoopParts) -> None:
        super().__init__(parts)
        self.probing: str | None = None
        self.cut = parts.boot.outage_cut

    @property
    def credential(self) -> str:
        """The fingerprint of the credential this node's launches use."""
        boot = self.boot
        return launch_credential(boot.backend.name, boot.launch_env or os.environ,
                                 boot.provider)

    def _backoff(self, attempt: int) -> float:
        live = self.state.live
        return outage_backoff(attempt, live.outage_backoff, live.max_outage_backoff)

    def before_launch(self) -> StepOutcome | None:
        """At a step boundary: while the credential's provider is down (another node found
        it, or this one before a park), wait instead of calling the API. None: launch
        (as the probe when ``OutageWait.probing`` is set). A StepOutcome (``stopped``)
        when a stop or a finish ended the wait. Raises Park on a pause."""
        row, go = self._may_go()
        if go or row is None:
            return None
        return self._hold(row, f"another node found a provider outage ({row.label})")

    def may_launch(self) -> bool:
        """For a launch that may wait (a waiting loop's SYNC): True when it may go now, as
        ``before_launch`` would let it, without waiting. No outage recorded for the
        credential: True. While one is: False until its wake instant, then True for the
        one node that claims the probe (``OutageWait.probing`` set: the launch's
        ``after_launch`` ends the outage or records the next attempt), so a node whose
        waiting loop is the credential's only launcher still finds the provider back.
        A resume that cut a parked outage wait short probes at once. Never blocks."""
        return self._may_go()[1]

    def _may_go(self) -> tuple[OutageRow | None, bool]:
        """The credential's outage (None: none recorded) and whether this node may launch
        now: no outage, this node's own probe, or the probe claimed now that the wake
        instant has come (``OutageWait.probing`` set). A resume's cut wakes it first."""
        outages, credential = Outages(self.boot.paths.tree.db_path), self.credential
        node, now = self.boot.paths.branch, self.clock.time()
        if self.cut:
            self.cut = False
            outages.wake_now(credential, now)
        row = outages.outage(credential)
        if row is None or self.probing == credential:
            return row, True
        action, _ = decide_outage(row, node, now, OUTAGE_POLL)
        if action is OutageAction.PROBE and outages.claim_probe(credential, node, now):
            self.probing = credential
            return row, True
        return row, False

    def after_launch(self, result: AttemptResult) -> bool:
        """A launch ended. True when it failed with a transient API error (``is_outage``;
        a waiting SYNC's failure counts, though its row says ``completed``): the outage is recorded for the credential and ``wait_out`` is due (the step is then
        re-entered: no retry spent, no failure counted). False otherwise (the launch's
        outcome stands); this node's probe, having got through, ends the outage."""
        outages, credential = Outages(self.boot.paths.tree.db_path), self.credential
        report, outcome = result.report, result.outcome
        # A waiting loop's SYNC fails nothing: its failure is recorded ``completed`` with
        # its exit code, and it is an outage all the same.
        failed = outcome.status is Status.FAILED or (
            outcome.status is Status.COMPLETED and outcome.exit_code != 0)
        if result.launched and failed and report is not None \
                and not report.ok and is_outage(report.error_kind, report.api_status):
            outages.record(credential, outage_label(report.error_kind, report.api_status),
                           self.boot.paths.branch, self.clock.time(), self._backoff)
            self.probing = None
            return True
        if result.launched and self.probing == credential:
            self._over(outages, credential)
        return False

    def wait_out(self) -> StepOutcome | None:
        """Wait out the outage ``after_launch`` recorded. None: launch again (the step is
        re-entered); a StepOutcome (``stopped``) when a stop or a finish ended the wait.
        Raises Park on a pause."""
        row = Outages(self.boot.paths.tree.db_path).outage(self.credential)
        if row is None:  # another node's probe ended it meanwhile
            return None
        return self._hold(row, f"the provider failed ({row.label})")

    def _over(self, outages: Outages, credential: str) -> None:
        """This node's probe got through: the outage is over for everyone (posted once)."""
        row = outages.outage(credential)
        self.probing = None
        if row is None or row.prober != self.boot.paths.branch or \
                not outages.clear(credential):
            return
        node = self.boot.paths.branch
        self.ledger.post_notice(node, f"provider outage over ({row.label})",
                                f"a launch got through after {row.attempts} failed "
                                "attempt(s); launching again")

    def _hold(self, row: OutageRow, why: str) -> StepOutcome | None:
        """Wait until this node may launch (or probe), with the notices and the
        ``outage_wait`` event; the waited time is credited to the walls."""
        node, state = self.boot.paths.branch, self.state
        mono = self.clock.monotonic()
        shown = outage_detail(row.label, row.attempts, row.wake_at)
        self.reporter.notice(f"{why}; {shown}")
        self.ledger.post_notice(node, shown, cut_short_hint(
            f"{why}. The run waits and launches again then", node))
        self.ledger.add_event(node, OUTAGE_EVENT, actor="loop", status="started",
                              metadata=shown, run_id=state.run_id, iter_id=state.iter_id)
        try:
            ended = self._wait()
        finally:
            credit_wait(self.ledger, node, state, self.clock.monotonic() - mono)
        took = self.clock.monotonic() - mono
        how = f"ended: {ended.reason}" if ended is not None else \
            outage_over_notice(row.label, row.attempts, took)
        self.ledger.add_event(node, OUTAGE_EVENT, actor="loop", status="completed",
                              metadata=how, run_id=state.run_id, iter_id=state.iter_id)
        return ended

    def _wait(self) -> StepOutcome | None:
        """Block until ``decide_outage`` lets this node launch or probe, acting on signals
        at every wake; None when it may launch (``OutageWait.probing`` set as the probe)."""
        outages = Outages(self.boot.paths.tree.db_path)
        credential, node = self.credential, self.boot.paths.branch
        while True:
            now = self.clock.time()
            action, until = decide_outage(outages.outage(credential), node, now, OUTAGE_POLL)
            if action is OutageAction.LAUNCH:
                return None
            if action is OutageAction.PROBE:
                if outages.claim_probe(credential, node, now):
                    self.probing = credential
                    return None
                continue  # another node claimed it first: read the row again
            ended = wait_signal(self.steering, "waiting out a provider outage")
            if ended is not None:
                return ended
            wake = until if until is not None else now + 1.0
            self.waker.wait(max(0.0, wake - now), poll=USAGE_POLL)
