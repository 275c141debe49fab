"""Which way each config key tightens, and what a node may change in its own config.

The rule (docs/security.md, "Limits a node cannot loosen"): a node acting on its own
config (``fractal node config set`` in its worktree or loop, ``fractal node update`` of
itself) may only tighten it: lower a cap, shorten a wall, narrow its scope, add a
condition. It may never raise, clear or disarm one. A key with no safe direction (what
runs, what decides that the work is done) it may not change at all. Its parent, an
ancestor or the operator may change every key either way.

``TIGHTER`` gives each key of ``domain.config.KEYS`` its direction; a key missing from it
(a key added later and not yet classified) counts as ``LOCKED``. Directions compare the
effective values of two parsed configs (``NodeConfig``: defaults applied, durations in
seconds, money in USD), so an unset key is read as what it means (``max_iters`` unset:
unlimited; ``step_retries`` unset: 1). Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from enum import Enum
from types import MappingProxyType
from typing import NamedTuple

from fractal.domain.budget import default_reserve, round_usd
from fractal.domain.config import NodeConfig

__all__ = ["CHOICE_ORDER", "TIGHTER", "Loosening", "Tighter", "direction", "effective",
           "loosenings", "refusal"]


class Tighter(Enum):
    """Which change of a key's effective value is a tightening."""

    FREE = "free"  # not a limit: a node may change it either way
    LOWER = "lower"  # a smaller value is tighter; None (unset, off, unlimited) the loosest
    HIGHER = "higher"  # a larger value is tighter; None the loosest
    ON = "on"  # a flag: true is tighter
    ORDER = "order"  # one of the words of CHOICE_ORDER, tightest first
    SUBSET = "subset"  # a list of paths: fewer places is tighter, empty (everywhere) loosest
    LOCKED = "locked"  # no safe direction: a node may not change it at all


TIGHTER: Mapping[str, Tighter] = MappingProxyType({
    "title": Tighter.FREE,
    "agent": Tighter.LOCKED,  # what runs, and whether it reports or enforces its cost
    "provider": Tighter.LOCKED,  # the route decides how a launch is priced
    "model": Tighter.LOCKED,  # an unpriced model leaves the cost caps blind
    "effort": Tighter.FREE,  # spends under the same caps either way
    "base": Tighter.LOCKED,  # where its work is merged
    "meta": Tighter.LOCKED,  # which branch a meta node targets
    "parent": Tighter.LOCKED,
    "root": Tighter.LOCKED,
    "max_iters": Tighter.LOWER,
    "max_depth": Tighter.LOWER,
    "max_children": Tighter.LOWER,
    "max_descendants": Tighter.LOWER,
    "step_retries": Tighter.LOWER,
    "timeout": Tighter.LOWER,
    "iter_timeout": Tighter.LOWER,  # effective: iter_timeout, else interval
    "step_timeout": Tighter.LOWER,
    "interval": Tighter.LOCKED,  # a slower cadence is a longer iteration wall
    "sleep": Tighter.HIGHER,  # a node may slow itself down, never hurry
    "step_retry_backoff": Tighter.HIGHER,
    "wait": Tighter.FREE,  # one window of a wait: the wait itself never ends on it
    "max_cost": Tighter.LOWER,
    "max_iter_cost": Tighter.LOWER,
    "max_step_cost": Tighter.LOWER,
    "reserve_budget": Tighter.LOWER,  # effective: max_cost minus the reserve
    "sync": Tighter.LOCKED,  # how a node hears its parent while it works
    "detached": Tighter.FREE,
    "local": Tighter.ON,  # a node may stop pushing, never start
    "user": Tighter.LOCKED,
    "scope": Tighter.SUBSET,
    "exit_check": Tighter.LOCKED,  # the parent's test of done: no command is "stricter"
    "check_timeout": Tighter.LOWER,
    "no_progress": Tighter.LOWER,
    "max_failed_iters": Tighter.LOWER,
    "on_usage_limit": Tighter.ORDER,
    "max_usage_wait": Tighter.LOWER,
    "outage_backoff": Tighter.HIGHER,
    "max_outage_backoff": Tighter.HIGHER,
    "usage_pause_at": Tighter.LOWER,
    "pass_score": Tighter.HIGHER,
    "min_gain": Tighter.HIGHER,
    "stagnation": Tighter.LOWER,
})
"""Every config key -> which change of its effective value tightens it."""

CHOICE_ORDER: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "on_usage_limit": ("stop", "wait"),
})
"""The words of each ``ORDER`` key, tightest first."""

_MAY = {
    Tighter.LOWER: "lower",
    Tighter.HIGHER: "raise",
    Tighter.ON: "turn on",
    Tighter.ORDER: "tighten",
    Tighter.SUBSET: "narrow",
}
_WOULD = {
    Tighter.LOWER: "raise",
    Tighter.HIGHER: "lower",
    Tighter.ON: "turn off",
    Tighter.ORDER: "loosen",
    Tighter.SUBSET: "widen",
    Tighter.LOCKED: "change",
}
_LABELS = {"reserve_budget": "max_cost - reserve_budget", "iter_timeout": "iteration wall"}


class Loosening(NamedTuple):
    """A key a change loosens (or, ``LOCKED``, changes): its effective values before and
    after (``effective``)."""

    key: str
    way: Tighter
    old: object
    new: object


def direction(key: str) -> Tighter:
    """``key``'s direction; ``LOCKED`` for a key the table does not classify."""
    return TIGHTER.get(key, Tighter.LOCKED)


def effective(config: NodeConfig, key: str) -> object:
    """The value of ``key`` that the direction compares: the parsed value, except
    ``iter_timeout`` (its wall: ``interval`` when unset, seconds) and ``reserve_budget``
    (the budget before the reserve: ``max_cost`` minus the reserve, USD; None uncapped)."""
    if key == "iter_timeout":
        return config.iter_timeout if config.iter_timeout is not None else config.interval
    if key == "reserve_budget":
        if config.max_cost is None:
            return None
        reserve = (default_reserve(config.max_cost) if config.reserve_budget is None
                   else config.reserve_budget)
        return round_usd(config.max_cost - reserve)
    return getattr(config, key)


def _inside(path: str, area: str) -> bool:
    return path == area or path.startswith(area.rstrip("/") + "/")


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _paths(value: object) -> tuple[str, ...]:
    return tuple(str(p) for p in value) if isinstance(value, tuple | list) else ()


def _looser(way: Tighter, key: str, old: object, new: object) -> bool:
    """True when ``new`` is looser than ``old`` in direction ``way`` (any change, LOCKED)."""
    if old == new or way is Tighter.FREE:
        return False
    if way is Tighter.LOCKED:
        return True
    if way in (Tighter.LOWER, Tighter.HIGHER):  # None: unlimited / no requirement, loosest
        before, after = _number(old), _number(new)
        if after is None:
            return True
        if before is None:
            return False
        return after > before if way is Tighter.LOWER else after < before
    if way is Tighter.ON:
        return bool(old) and not new
    if way is Tighter.ORDER:
        words = CHOICE_ORDER[key]
        return words.index(str(new)) > words.index(str(old))
    areas, paths = _paths(old), _paths(new)
    if not areas:
        return False  # everywhere before: any list is narrower or the same
    return not paths or any(not any(_inside(p, a) for a in areas) for p in paths)


def loosenings(before: NodeConfig, after: NodeConfig) -> tuple[Loosening, ...]:
    """Every key whose effective value ``after`` is looser than ``before`` (or, for a
    ``LOCKED`` key, differs), in ``TIGHTER`` order; ``()`` when the change only tightens."""
    found: list[Loosening] = []
    for key in dict.fromkeys([*TIGHTER, *(f.name for f in fields(NodeConfig))]):
        way = direction(key)
        old, new = effective(before, key), effective(after, key)
        if _looser(way, key, old, new):
            found.append(Loosening(key, way, old, new))
    return tuple(found)


def _show(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return json.dumps(value)


def refusal(node: str, parent: str | None, root: str,
            found: tuple[Loosening, ...]) -> str:
    """Why ``node`` may not make a change that loosens ``found`` (non-empty) in its own
    config, naming who may (``parent``, an ancestor, the operator at ``root``) and how."""
    parts = [f"{f.key} would {_WOULD[f.way]} ({_LABELS.get(f.key, f.key)} {_show(f.old)} "
             f"-> {_show(f.new)})" for f in found]
    first = found[0]
    who = ("the operator at the root" if parent is None or parent == root
           else f"{parent} (its parent), an ancestor or the operator at the root")
    rule = (f"a node may not change its own {first.key}" if first.way is Tighter.LOCKED
            else f"a node may only {_MAY[first.way]} its own {first.key}")
    return (f"{node} may only tighten its own limits: {'; '.join(parts)}; only {who} may "
            f"{_WOULD[first.way]} {first.key} ({rule}): ask them to run `fractal node config "
            f"set --node {node} {first.key}=...` from their loop or the main checkout")

