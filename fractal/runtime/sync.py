"""The SYNC pseudo-steps: a launch of the SYNC mode prompt plus the digest of what changed
in the tree since the previous SYNC of the run. The strict one runs before a step whose
kind asks for it (``StepKind.syncs_before``), in the iteration's session. The lenient one
is a waiting loop's (an approval gate, the children, a finish drain, a hand-back's
re-merge): at each look it runs only when the tree holds news since the last SYNC
(``domain.prompt.digest.news``: a child settled, a gate opened, a notice, a message or a
hand-back arrived), so a quiet wait launches nothing, and each runs in a fresh session
(the prompt and its digest, never the conversation of the SYNCs before it). A closed
usage window is waited out as for any launch (``UsageWait``), and so is a provider outage
found before the strict SYNC's launch (``OutageWait``).

What a SYNC was shown counts as seen only once that SYNC completed: a launch that failed,
timed out, met a provider outage or a closed usage window, or was parked leaves the news
(and the digest's ``since``) where the last completed SYNC left it, so the next SYNC shows
it again and a waiting loop's next look runs one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from fractal.assets import mode_text
from fractal.domain.run.outcome import Status, StepOutcome
from fractal.domain.steps.files import StepFile, banner_verdict, step_label
from fractal.runtime.kinds.base import StepPlan, StepResult, wait_ended
from fractal.runtime.launches import Launches
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.outagewait import OutageWait
from fractal.runtime.steering import Park
from fractal.runtime.usagewait import UsageWait
from fractal.store.timefmt import utc_now

if TYPE_CHECKING:
    from fractal.domain.prompt.digest import DigestKey

__all__ = ["FRESH", "Sync"]

FRESH: Mapping[str, str] = MappingProxyType({"detached": "true"})
"""The frontmatter a waiting loop's SYNC launches under: a fresh session each time, so
its prompt is one SYNC's (about 5 KB), not the iteration's growing conversation."""


class Sync(LoopPart):
    """Runs the SYNC pseudo-steps of the run through its ``Launches``."""

    def __init__(self, parts: LoopParts, launches: Launches, usage: UsageWait,
                 outage: OutageWait) -> None:
        super().__init__(parts)
        self.launches = launches
        self.usage = usage
        self.outage = outage
        self._synced_at: str | None = None  # when the last completed SYNC started (UTC)
        self._seen: DigestKey | None = None  # what the last completed SYNC was shown
        # What the SYNC being launched was shown, kept until it completed (``_settle``).
        self._showing: tuple[str, DigestKey | None] | None = None

    def before(self, plan: StepPlan, node_md: str) -> StepResult:
        """The strict SYNC before ``plan``: a failure is non-fatal, a timeout fatal (the
        caller decides), a pause parks. Never retried; a closed usage window is waited
        out as for a step (``stopped`` when the run ends instead, the end in ``ending``),
        and so is a provider outage the SYNC meets (then the SYNC runs again)."""
        banner = f"SYNC (before {plan.file.name})"
        self.reporter.banner_open(banner)
        started = self.clock.monotonic()
        while True:  # a closed usage window is waited out, then the SYNC runs again
            early = self.usage.before_launch(plan.file.name) or self.outage.before_launch()
            if early is not None:
                self._close(banner, early, None, started)
                return wait_ended(early, self.usage.ending, launched=False)
            limit = self.launches.limit({})
            result = self.launches.run(plan.file, self._body(), {}, node_md, limit, 1,
                                       label=f"SYNC before {step_label(plan.file)}",
                                       suffix="-sync", name="SYNC")
            self.usage.after_launch(result.launched and result.window is None)
            if result.window is None:
                if not self.outage.after_launch(result):
                    break
                self._close(banner, result.outcome, limit, started)  # the provider is down
                ended = self.outage.wait_out()
                if ended is not None:
                    return wait_ended(ended, None, launched=True)
                self.reporter.banner_open(f"{banner}, again after the provider outage")
                continue
            self._close(banner, result.outcome, limit, started)
            ended = self.usage.wait_out(result.window, plan.file.name, result.step_id)
            if ended is not None:
                return wait_ended(ended, self.usage.ending, launched=True)
        self._close(banner, result.outcome, limit, started)
        self._settle(result.outcome)
        if result.outcome.status is Status.PAUSED:
            raise Park(f"during SYNC before {plan.file.name}")
        return StepResult(result.outcome, limit, result.launched)

    def while_waiting(self, file: StepFile | None, node_md: str, *,
                      what: str | None = None) -> bool:
        """A lenient SYNC while waiting (approval or children: the awaited step's number; a
        drain: 0). It never fails the wait; a pause, stop or finish is left for the wait's
        own check. Nothing is launched (and False returned) unless the tree holds news
        since the last SYNC of the run (``domain.prompt.digest.news``); a launch starts a fresh
        session (a ``detached`` one: it resumes nothing and is not kept). A closed usage
        window is waited out as for any launch; True when that ends the run
        (``UsageWait.ending`` says how). While the credential's provider is down nothing is
        launched either: the news is kept for the SYNC after the outage, which the first
        look past the outage's wake instant launches as the credential's probe (a node
        alone on its credential, as a lead whose children sit at their gates, ends the
        outage itself). An outage a launch meets is recorded, so the other launches of the
        tree wait for it. News counts as seen only once a SYNC completed: one that failed,
        timed out or met an outage leaves it for the next look."""
        # deferred: waiting loops only: start-up cost (1 module)
        from fractal.domain.prompt.digest import news
        from fractal.runtime.digest import look  # deferred: start-up cost (3 modules)

        found = look(self.ledger, self.boot.paths, self._synced_at)
        if found is None or not news(self._seen, found.key):
            return False  # a quiet look: the wait costs nothing
        if not self.outage.may_launch():
            return False  # the provider is down: the news waits for the outage's end
        target = file or StepFile(filename="", prefix="", name="drain", position=0, total=0)
        what = what or (f"awaiting {target.name}" if file else "draining children")
        banner, started, usage = f"SYNC ({what})", self.clock.monotonic(), self.usage
        self.reporter.banner_open(banner)
        try:
            while True:  # a closed usage window is waited out, then the SYNC runs again
                ended = usage.before_launch("SYNC")
                if ended is not None:
                    self._close(banner, ended, None, started)
                    return usage.ending is not None
                limit = self.launches.limit({})
                result = self.launches.run(target, self._body(), FRESH, node_md, limit, 1,
                                           label=f"SYNC while {what}", suffix="-sync",
                                           name="SYNC", lenient=True)
                usage.after_launch(result.launched and result.window is None)
                if result.window is None:
                    if self.outage.after_launch(result):  # an outage met is recorded for all
                        self.reporter.notice("the provider failed during the SYNC; its news "
                                             "waits for the SYNC after the outage")
                    break
                self._close(banner, result.outcome, limit, started)
                ended = usage.wait_out(result.window, "SYNC", result.step_id)
                if ended is not None:
                    return usage.ending is not None
                self.reporter.banner_open(f"{banner}, again after the usage window")
        except Park:
            return False  # the pause signal stays pending: the wait parks its own row
        self._close(banner, result.outcome, limit, started)
        self._settle(result.outcome)
        return False

    def _body(self) -> str:
        """SYNC.md plus the digest of what changed since the previous completed SYNC of
        this run. What it shows is held in ``_showing`` until the launch ends (``_settle``)."""
        # deferred: SYNC steps only: start-up cost (1 module)
        from fractal.domain.prompt.digest import render_digest
        from fractal.runtime.digest import look  # deferred: start-up cost (3 modules)

        started = utc_now()
        found = look(self.ledger, self.boot.paths, self._synced_at)
        self._showing = (started, None if found is None else found.key)
        if found is None:
            return mode_text("SYNC")
        return mode_text("SYNC") + "\n" + render_digest(found.digest)

    def _settle(self, outcome: StepOutcome) -> None:
        """The SYNC launched last ended as ``outcome``: when it completed (exit 0), what it was
        shown counts as seen (its start is the next digest's ``since``, its key the one
        ``news`` compares); any other end (failed, timed out, parked, stopped) leaves both
        as the last completed SYNC left them, so the news is shown again."""
        showing, self._showing = self._showing, None
        if showing is None or outcome.status is not Status.COMPLETED or outcome.exit_code:
            return  # a waiting SYNC's failure is recorded completed, with its exit code
        self._synced_at = showing[0]
        if showing[1] is not None:  # an unreadable tree shows nothing: nothing was seen
            self._seen = showing[1]

    def _close(self, banner: str, outcome: StepOutcome, limit: float | None,
               started: float) -> None:
        self.reporter.banner_close(banner, banner_verdict(outcome, limit),
                                   self.clock.monotonic() - started)
