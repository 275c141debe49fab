"""The loop's cost guard: spend probes, reserve mode, the per-step budget, the budget finish,
advisory warnings and the budget landing.

A run has one ``BudgetGuard``, shared by the run loop, the iteration runner, the step
kinds, the launches and the supervisor's finalize; what it remembers (the bound tripped, the last good
spend reads, the warnings given) is ``RunState.budget``, and ``RunState.reserve`` says
whether the rest of the iteration runs in reserve mode. Caps are read from the live config
(config.json as it is on disk now), so a retune lands at the next probe; the ceiling is
held to the one the run's row records, which only fractal's verbs move. A spend that
reaches the ceiling (or drains into the reserve between iterations) sends a finish down
the subtree, and the run ends ``exited`` with exit 0 once the children drained.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from fractal.agents.base import Backend
from fractal.domain import budget
from fractal.domain.budget import Caps, Landing
from fractal.domain.config import NodeConfig
from fractal.domain.errors import FractalError
from fractal.domain.outcome import clip_reason
from fractal.domain.signals import Signal
from fractal.pricing import Freshness, refresh, token_priced
from fractal.runtime.clock import Clock, SystemClock
from fractal.runtime.context import Boot, RunState
from fractal.runtime.costing import LaunchBudget, rates_for, unpriceable
from fractal.runtime.filecache import FILES, live_config
from fractal.runtime.pane import Reporter
from fractal.store import spend
from fractal.store.ledger import Ledger

log = logging.getLogger(__name__)

FRESH_FOR = 1.0
"""Seconds a spend reading serves the probes of one launch (re-read after every launch)."""

BUDGET_EVENT = "budget"
"""Event name of the guard's notices and warnings (one row each, actor ``loop``)."""


class BudgetGuard:
    """Cost decisions for the run in ``state``; see the module docstring."""

    def __init__(self, boot: Boot, state: RunState, ledger: Ledger, reporter: Reporter,
                 clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.boot = boot
        self.state = state
        self.ledger = ledger
        self.reporter = reporter

    # -- reads ----------------------------------------------------------------------------

    @property
    def caps(self) -> Caps:
        """The caps as config.json says now (every probe reads them live; the iteration
        top's values when the file cannot be read or is invalid), the ceiling held to the
        one the run's row records (``budget.enforced_caps``): a hand edit of the file may
        lower it, never raise or clear it."""
        live = _config_now(self.boot.paths.config_path) or self.state.live
        caps = budget.caps_of(live.max_cost, live.max_iter_cost, live.max_step_cost,
                              live.reserve_budget)
        if not self.state.budget.cap_read:
            self._read_cap()
        return budget.enforced_caps(caps, self.state.budget.run_cap)

    def _read_cap(self) -> None:
        """Read the ceiling the run's row records into ``state.budget.run_cap`` (kept as it
        was when the read fails)."""
        try:
            row = self.ledger.run(self.state.run_id)
        except FractalError as exc:
            self.warn_once("cap-read", f"could not read the run's recorded ceiling ({exc}); "
                           "holding the last one read")
            return
        figures = self.state.budget
        figures.run_cap, figures.cap_read = (row.max_cost if row else None), True

    def _read(self) -> bool:
        """Refresh the spend figures in ``state.budget`` unless they are fresh: read since
        the last launch ended, in this iteration, under FRESH_FOR seconds ago (children
        spend concurrently). Returns False when the read failed (the last good figures stay
        in place; warned once)."""
        figures, now = self.state.budget, self.clock.monotonic()
        if (figures.read_at is not None and now - figures.read_at < FRESH_FOR
                and figures.read_iter == self.state.iter_id):
            return True
        try:
            run, it = spend.run_and_iteration_spend(self.ledger.db_path, self.state.run_id,
                                                    self.state.iter_id)
        except (FractalError, OSError) as exc:
            self.warn_once("spend-read", f"could not read the run's spend ({exc}); holding the "
                           "last good figure")
            return False
        self._read_cap()  # a retune through fractal's verbs moves the record too
        figures.run_spent, figures.iter_spent = run.usd, it.usd
        figures.run_priced, figures.run_unpriced = run.priced, run.unpriced
        figures.read_at, figures.read_iter = now, self.state.iter_id
        return True

    def stale(self) -> None:
        """Forget the spend figures' freshness (a launch ended; an iteration began)."""
        self.state.budget.read_at = None

    def run_spent(self) -> float:
        """USD spent by the run's subtree; the last good reading (0 if none) when a read fails,
        never "nothing spent" after a good one."""
        self._read()
        return self.state.budget.run_spent or 0.0

    def iter_spent(self) -> float:
        """USD spent by the current iteration's own steps (last good reading on failure)."""
        if self.state.iter_id is None:
            return 0.0
        self._read()
        return self.state.budget.iter_spent or 0.0

    # -- notices --------------------------------------------------------------------------

    def note(self, text: str, *, warning: bool = True) -> None:
        """Show ``text`` in the pane, log it, and record it as a ``budget`` event."""
        if warning:
            self.reporter.warning(text)
            log.warning("%s", text)
        else:
            self.reporter.notice(text)
            log.info("%s", text)
        try:
            self.ledger.add_event(self.boot.paths.branch, BUDGET_EVENT, actor="loop",
                                  status="completed", metadata=clip_reason(text),
                                  run_id=self.state.run_id, iter_id=self.state.iter_id)
        except FractalError as exc:
            log.warning("could not record a budget event: %s", exc)

    def warn_once(self, key: str, text: str) -> None:
        """``note`` the warning unless ``key`` was already warned about in this run."""
        if key not in self.state.budget.warned:
            self.state.budget.warned.add(key)
            self.note(text)

    # -- iteration boundaries ------------------------------------------------------------

    def iteration_top(self) -> bool:
        """At the top of an iteration (after the config re-read): reset reserve mode, heal
        registry drift, give the runaway warning, refresh a day-old price table, and check
        the boundary against the caps just read. True when the run ends here."""
        self.state.reserve = False
        self.stale()
        self._read_cap()
        self.heal_registry()
        caps = self.caps
        if caps.armed and not self.boot.backend.enforces_budget and not self._any_wall():
            self.warn_once("runaway", f"cost caps are armed but the {self.boot.backend.name} "
                           "agent cannot enforce a budget in flight and no timeout is set: one "
                           "runaway step could overshoot without bound; set step_timeout")
        if self.boot.pricing:
            result = refresh()
            if result.state is Freshness.STALE:
                self.warn_once("pricing-stale", f"could not refresh the price table "
                               f"({result.error}); using the copy at {result.path}")
        return self.at_boundary()

    def at_boundary(self) -> bool:
        """Between iterations: once the run's spend drained into the reserve (or past the
        ceiling), send the budget finish down the subtree. True when the run ends here."""
        if self.state.budget.reason is not None:
            return True
        self.stale()
        caps = self.caps
        if not caps.armed:  # no ceiling, no reserve: the spend cannot end the run here
            return False
        reason = budget.boundary_reason(caps, self.run_spent())
        if reason is None:
            return False
        self.trip(reason)
        return True

    def _any_wall(self) -> bool:
        return any(v is not None for v in (self.boot.run_timeout, self.boot.iter_timeout,
                                           self.boot.interval, self.state.live.step_timeout))

    # -- steps ----------------------------------------------------------------------------

    def before_step(self, *, first: bool, finish_pending: bool) -> str | None:
        """Before a step (and its SYNC): past the first step, a crossed subtree ceiling stops
        queuing steps (returns the reason, after sending the budget finish); otherwise decide
        whether the rest of the iteration runs in reserve mode."""
        caps = self.caps
        if not caps.armed and not finish_pending:
            return None
        spent = self.run_spent() if caps.armed else 0.0
        if not first:
            over = budget.ceiling_reason(caps, spent)
            if over is not None:
                self.trip(over)
                return over
        if self.state.reserve:
            return None
        cause = budget.reserve_cause(caps, spent, self.iter_spent() if caps.armed else 0.0,
                                     cascaded=finish_pending and self._cascaded())
        if cause is not None:
            self.state.reserve = True
            self.note(f"reserve mode for the rest of iteration {self.state.run_id}."
                      f"{self.state.iteration}: {cause}", warning=False)
        return None

    def spent_out(self) -> str:
        """A launch was skipped for budget: the bound that tripped (tripping the ceiling now
        if nothing had yet), so the run winds down."""
        if self.state.budget.reason is None:
            self.trip(budget.ceiling_reason(self.caps, self.run_spent())
                      or budget.boundary_reason(self.caps, self.run_spent())
                      or f"{budget.SUBTREE_STEM} (spent {budget.usd4(self.run_spent())} "
                      "with no step budget left)")
        return self.state.budget.reason or "over budget"

    def ceiling_crossed(self) -> bool:
        """True once the run's spend reached ``max_cost`` (a retry never buys another try)."""
        caps = self.caps
        return caps.armed and budget.ceiling_reason(caps, self.run_spent()) is not None

    def _cascaded(self) -> bool:
        """A pending finish carries an ancestor's budget reason (not this run's own)."""
        try:
            rows = self.ledger.signals(self.state.run_id)
        except FractalError:
            return False
        return any(r.signal == Signal.FINISH.value and budget.is_budget_reason(r.meta)
                   and self.state.budget.reason is None for r in rows)

    def launch(self, backend: Backend, model: str | None, provider: str | None) -> LaunchBudget:
        """The cost side of one launch: its budget, the COST_BUDGET label, how its tokens
        are priced, and a refusal when a cost cap cannot be tracked for it."""
        caps = self.caps
        if not caps.armed:
            rates = rates_for(provider) if token_priced(backend.name, provider) else None
            return LaunchBudget(None, "no limit", rates)
        spent = self.run_spent()
        usd = budget.step_budget(caps, spent, self.iter_spent())
        label = budget.cost_budget_label(caps, spent, backend.enforces_budget)
        if not token_priced(backend.name, provider):
            return LaunchBudget(usd, label)
        refusal = self.refusal(backend, model, provider)
        return LaunchBudget(usd, label, None if refusal else rates_for(provider), refusal)

    def refusal(self, backend: Backend, model: str | None, provider: str | None) -> str | None:
        """Why a launch cannot honour the armed cost caps (its spend cannot be priced), or
        None."""
        if not self.caps.armed or not token_priced(backend.name, provider):
            return None
        return unpriceable(backend.name, model, provider)

    def after_launch(self, backend: Backend, step_name: str, cost: float | None,
                     launched: bool) -> None:
        """After a launch: the advisory step-cap warning for an agent that cannot enforce it,
        and the once-per-run warning when the run's spend is entirely untracked."""
        self.stale()
        caps = self.caps
        if not caps.armed or not launched:
            return
        if (cost is not None and caps.max_step_cost is not None and not backend.enforces_budget
                and budget.round_usd(cost) > caps.max_step_cost):
            self.note(f"{step_name} cost {budget.usd4(cost)}, over max_step_cost "
                      f"{budget.usd(caps.max_step_cost)} (the {backend.name} agent cannot "
                      "enforce it in flight)")
        figures = self.state.budget
        if "untracked" not in figures.warned and self._read():
            if figures.run_priced:
                figures.warned.add("untracked")  # tracked: no need to look again
            elif figures.run_unpriced:
                self.warn_once("untracked", f"cost caps are armed but no step of run "
                               f"{self.state.run_id} recorded a cost: the budget guards cannot "
                               "trip; use an agent that reports its cost, or a priced model")

    # -- the budget finish and the landing ----------------------------------------------

    def trip(self, reason: str) -> None:
        """A budget bound tripped: remember it (the first one wins) and send a finish with
        ``reason`` to every running descendant, deepest first, then to this run."""
        if self.state.budget.reason is not None:
            return
        self.state.budget.reason = reason
        self.note(f"{reason}: winding the subtree down")
        try:
            send_budget_finish(self.boot, self.ledger, reason)
        except (FractalError, OSError) as exc:
            self.note(f"could not send the budget finish to the subtree: {exc}")

    def landing(self) -> Landing:
        """How the budget shapes this run's end (``domain.budget.landing``)."""
        self.stale()
        try:
            reasons = [r.meta for r in self.ledger.signals(self.state.run_id)
                       if r.signal == Signal.FINISH.value]
        except FractalError:
            reasons = []
        return budget.landing(own_reason=self.state.budget.reason, finish_reasons=reasons,
                              finished=self.state.finish_drained, caps=self.caps,
                              run_spent=self.run_spent())

    def figures(self) -> str:
        """``spent $X of $Y max`` for an exit notice of a capped run ('' when uncapped)."""
        caps = self.caps
        if caps.max_cost is None:
            return ""
        spent = self.run_spent()
        figures = self.state.budget
        shown = "unknown" if figures.run_priced == 0 and figures.run_unpriced > 0 \
            else budget.usd4(spent)  # launched steps ran and none recorded a cost
        return f"spent {shown} of {budget.usd(caps.max_cost)} max"

    # -- registry drift --------------------------------------------------------------------

    def heal_registry(self) -> None:
        """A direct config edit wins: the registry row is healed to match, loudly, per key."""
        branch = self.boot.paths.branch
        try:
            row = self.ledger.node(branch)
            if row is None:
                return
            live = self.state.live
            wanted: Mapping[str, float | int | None] = {
                "max_cost": live.max_cost, "max_depth": live.max_depth,
                "max_children": live.max_children, "max_descendants": live.max_descendants}
            drift = {k: v for k, v in wanted.items() if getattr(row, k) != v}
            for key, value in drift.items():
                self.note(f"registry {key} {getattr(row, key)} differs from config.json "
                          f"{value}; healed the registry (retune with `fractal node update`)")
            if drift:
                self.ledger.set_caps(branch, drift)
            if row.title != live.title:
                self.ledger.set_title(branch, live.title)
        except FractalError as exc:
            log.warning("could not heal the registry of %s: %s", branch, exc)


def _config_now(path: Path) -> NodeConfig | None:
    """config.json as it is on disk now (parsed again only when the file changed:
    ``FILES``), or None when it is unreadable or invalid (refresh_live warns about that at
    the iteration top)."""
    try:
        return FILES.get(path, live_config)
    except (FractalError, OSError):
        return None


def send_budget_finish(boot: Boot, ledger: Ledger, reason: str) -> None:
    """Write a finish carrying ``reason`` to every running descendant of the node (deepest
    first, each attributed ``(via finish of <node>)``), then to the node's own run: the
    control plane's recursive finish, which neither heals nor takes the tree lock."""
    from fractal.control import finish_subtree

    finish_subtree(boot.paths.tree, ledger, boot.paths.branch, reason)
