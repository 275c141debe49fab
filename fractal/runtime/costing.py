"""Pricing a launch: what a token-priced backend's spend costs, and when a cost cap cannot
be honoured (a token-priced launch under armed caps needs a model the price table prices).

``PricedBackend`` wraps a backend so that every token-usage report of its stream is followed
by a cost report priced from the LiteLLM table: the cost then flows through the loop like
any agent-reported figure (flushed live, kept when the step is killed). ``check_pricing`` is
the preflight: fetch or refresh the table when a run needs it, abort when there is none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fractal.agents.base import (
    AgentEvent,
    Backend,
    CostEvent,
    Invocation,
    LaunchRequest,
    ModelEvent,
    StreamParser,
    UsageEvent,
    resolve_route,
)
from fractal.agents.registry import resolve_backend
from fractal.domain.budget.prices import Rates, lookup, price_usage
from fractal.domain.errors import FractalError
from fractal.pricing import (
    Freshness,
    PricingError,
    load_table,
    pricing_path,
    refresh,
    token_priced,
)

__all__ = ["LaunchBudget", "PricedBackend", "PricedParser", "RatesFor", "check_pricing",
           "rates_for", "unpriceable"]

log = logging.getLogger(__name__)

RatesFor = Callable[[str | None], Rates | None]
"""Rates of a model name (None: unknown model), or None when the table has no price."""


@dataclass(frozen=True)
class LaunchBudget:
    """The cost side of one launch. ``usd`` is the per-step budget (None: no cap; <= 0: the
    launch is skipped, ``over budget``); ``label`` is ``COST_BUDGET``; ``rates`` prices a
    token-priced backend's usage (None: it reports dollars itself, or cannot be priced);
    ``refusal`` fails the launch (a cost cap the loop cannot track)."""

    usd: float | None
    label: str
    rates: RatesFor | None = None
    refusal: str | None = None

    @property
    def skip(self) -> bool:
        """True when the budget is spent: the step is recorded ``stopped``/``over budget``."""
        return self.usd is not None and self.usd <= 0


class PricedParser:
    """A stream parser that appends a CostEvent after each UsageEvent of ``inner``.

    The price uses ``model`` (the requested one) or, when none was requested, the model
    the stream says served it.
    """

    def __init__(self, inner: StreamParser, rates: RatesFor, model: str | None) -> None:
        self.inner = inner
        self.rates = rates
        self.model = model
        self.served: str | None = None

    def _priced(self, events: list[AgentEvent]) -> list[AgentEvent]:
        out: list[AgentEvent] = []
        for event in events:
            out.append(event)
            if isinstance(event, ModelEvent):
                self.served = event.model
            elif isinstance(event, UsageEvent):
                rates = self.rates(self.model or self.served)
                if rates is not None:
                    out.append(CostEvent(price_usage(rates, event.input_tokens,
                                                     event.cached_input_tokens,
                                                     event.output_tokens)))
        return out

    def feed(self, line: str) -> list[AgentEvent]:
        """``inner.feed`` with the priced cost after each usage report."""
        return self._priced(self.inner.feed(line))

    def finish(self) -> list[AgentEvent]:
        """``inner.finish`` with the priced cost after each usage report."""
        return self._priced(self.inner.finish())


class PricedBackend:
    """``inner`` with a pricing parser; every other attribute and method is ``inner``'s."""

    def __init__(self, inner: Backend, rates: RatesFor) -> None:
        self.inner = inner
        self.rates = rates
        self.name = inner.name
        self.mints_session = inner.mints_session
        self.enforces_budget = inner.enforces_budget
        self.soft_interrupt = inner.soft_interrupt
        self.requires_result = inner.requires_result
        self.providers = inner.providers

    def binary(self) -> str:
        """The inner backend's executable."""
        return self.inner.binary()

    def invocation(self, request: LaunchRequest) -> Invocation:
        """The inner backend's command line."""
        return self.inner.invocation(request)

    def env(self, request: LaunchRequest, environ: Mapping[str, str]) -> dict[str, str | None]:
        """The inner backend's reserved environment."""
        return self.inner.env(request, environ)

    def parser(self, request: LaunchRequest) -> PricedParser:
        """The inner parser, pricing each usage report."""
        return PricedParser(self.inner.parser(request), self.rates, request.model)

    def preflight(self, provider: str | None, env: Mapping[str, str]) -> str | None:
        """The inner backend's preflight."""
        return self.inner.preflight(provider, env)


def rates_for(provider: str | None, path: Path | None = None) -> RatesFor:
    """A lookup into the cached price table (``pricing_path()`` by default). A table that
    cannot be read prices nothing (logged)."""
    where = path or pricing_path()
    failed: list[str] = []

    def find(model: str | None) -> Rates | None:
        if not model:
            return None
        try:
            return lookup(load_table(where), model, provider)
        except PricingError as exc:
            if not failed:  # once per launch
                failed.append(str(exc))
                log.warning("cannot price %s: %s", model, exc)
            return None

    return find


def unpriceable(backend: str, model: str | None, provider: str | None) -> str | None:
    """Why a cost cap cannot be honoured for a token-priced launch, or None: no model (``a cost cap requires a model``) or a model the table does not price."""
    if not model:
        return (f"a cost cap requires a model: the {backend} agent reports token usage only, "
                "so set `model` (config or step frontmatter) to a model in the price table")
    path = pricing_path()
    try:
        table = load_table(path)
    except PricingError as exc:
        return f"a cost cap needs the price table to price {backend}'s tokens: {exc}"
    if lookup(table, model, provider) is None:
        return (f"model {model!r} has no price in the price table {path}; choose a priced "
                "model or remove the cost caps")
    return None


def _step_needs(config_model: str | None, backend: Backend, provider: str | None,
                fields: Sequence[Mapping[str, str]], worktree: Path) -> list[str]:
    """Descriptions of the launches whose spend is priced from tokens (a model or a route)."""
    needs: list[str] = []
    if token_priced(backend.name, provider) and (config_model or provider):
        needs.append(f"the {backend.name} agent")
    for fm in fields:
        if "agent" not in fm and "model" not in fm:
            continue
        try:
            step = resolve_backend(fm["agent"], worktree) if "agent" in fm else backend
            route = resolve_route(step, fm.get("provider"), provider)
        except FractalError:
            continue  # that step fails at launch, naming its override
        if token_priced(step.name, route) and (fm.get("model") or config_model or route):
            needs.append(f"the {step.name} agent of a step")
    return needs


def check_pricing(config_model: str | None, backend: Backend, provider: str | None,
                  fields: Sequence[Mapping[str, str]], worktree: Path,
                  warn: Callable[[str], None], capped: bool = False) -> bool:
    """The pricing preflight: when any launch is priced from tokens, refresh the price
    table. Returns whether pricing is needed.

    The rule: pricing ends only a run it bounds. A stale copy is used with a warning. No
    copy and a failed fetch: under a cost cap (``capped``: ``max_cost`` set) raises
    PricingError, its cause before any path or URL (the caller aborts the run); without
    one it warns in one line and the run goes on, its token-priced costs recorded unknown
    (NULL) until a later iteration's refresh gets the table.
    """
    needs = _step_needs(config_model, backend, provider, fields, worktree)
    if not needs:
        return False
    result = refresh()
    if result.state is Freshness.MISSING and capped:
        raise PricingError(
            f"cannot price {needs[0]} under max_cost: {result.error}; no copy at "
            f"{result.path} (check the network, point FRACTAL_PRICING_URL at a copy of the "
            "table, e.g. file:///path/to/prices.json, or remove max_cost)")
    if result.state is Freshness.MISSING:
        text = (f"no price table ({result.error}); costs of {needs[0]} are recorded "
                "unknown until it can be fetched")
        log.warning("%s", text)
        warn(" ".join(text.split()))
        return True
    if result.state is Freshness.STALE:
        hours = (result.age or 0.0) / 3600
        text = (f"could not refresh the price table ({result.error}); using the copy at "
                f"{result.path} from {hours:.0f} h ago")
        log.warning("%s", text)
        warn(text)
    return True
