"""The node ``config.json`` schema: keys, defaults, validation and CLI coercion. Every key
is written to the file; ``null`` means unset and reads as the key's default. Validation
returns every problem at once so one edit can fix them all (docs/configuration.md)."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

from fractal.domain.durations import parse_duration
from fractal.domain.errors import ConfigError, InvalidValue
from fractal.domain.pause_at import parse_pause_at
from fractal.domain.reserve import resolve_reserve
from fractal.domain.scope import normalise_scope

__all__ = [
    "KEYS",
    "NULL_DISABLES",
    "KeySpec",
    "Kind",
    "NodeConfig",
    "coerce_value",
    "default_config",
    "normalise_scope",
    "parse_config",
    "resolve_reserve",
    "unknown_keys",
    "validate_config",
]

_MAX_INT = 2**63 - 1  # SQLite INTEGER range
_RESERVE_SHARE = 0.99  # reserve_budget must stay under this share of max_cost


class Kind(StrEnum):
    """The JSON shape and rule of a config key."""

    TEXT = "text"  # string
    COUNT = "count"  # whole number >= 1
    LIMIT = "limit"  # whole number >= 0
    DURATION = "duration"  # "<number><unit>" string, see durations.py
    USD = "usd"  # number > 0
    USD_RESERVE = "usd_reserve"  # number >= 0
    FLAG = "flag"  # true / false
    PATHS = "paths"  # list of canonical relative paths
    COMMAND = "command"  # non-empty shell command string
    PERCENT = "percent"  # "95%" or a fraction in (0, 1]
    CHOICE = "choice"  # one of the words listed in CHOICES
    SCORE = "score"  # number in (0, 1]


@dataclass(frozen=True)
class KeySpec:
    """One config key: its ``name``, ``kind``, JSON ``default`` (None = unset) and ``doc``."""

    name: str
    kind: Kind
    default: object
    doc: str


def _specs(*rows: tuple[str, Kind, object, str]) -> dict[str, KeySpec]:
    return {name: KeySpec(name, kind, default, doc) for name, kind, default, doc in rows}


KEYS: Mapping[str, KeySpec] = _specs(
    ("title", Kind.TEXT, None, "One-line description shown in listings."),
    ("agent", Kind.TEXT, None, "Agent backend for every step (frontmatter may override)."),
    ("provider", Kind.TEXT, None, "Provider route for the agent."),
    ("model", Kind.TEXT, None, "Model pinned for every step."),
    ("effort", Kind.TEXT, None, "Reasoning effort passed to the agent."),
    ("base", Kind.TEXT, None, "Branch the node was forked from."),
    ("meta", Kind.TEXT, None, "Target branch of a meta node."),
    ("parent", Kind.TEXT, None, "Parent node's branch."),
    ("root", Kind.TEXT, None, "Root (user) node's branch of the tree."),
    ("max_iters", Kind.COUNT, None, "Iterations per run; null = unlimited."),
    ("max_depth", Kind.LIMIT, None, "Levels of descendants the node may spawn; null = unlimited."),
    ("max_children", Kind.LIMIT, None, "Direct children the node may hold; null = unlimited."),
    ("max_descendants", Kind.LIMIT, None, "Descendants in the subtree; null = unlimited."),
    ("step_retries", Kind.LIMIT, 1, "Extra attempts a failed launch gets; 0 disables retries."),
    ("timeout", Kind.DURATION, None, "Whole-run wall."),
    ("iter_timeout", Kind.DURATION, None, "Per-iteration wall (defaults to interval)."),
    ("step_timeout", Kind.DURATION, None, "Per-step ceiling."),
    ("interval", Kind.DURATION, None, "Fixed cadence between iteration starts."),
    ("sleep", Kind.DURATION, None, "Fixed gap slept between iterations."),
    ("step_retry_backoff", Kind.DURATION, "10s", "Delay before each retry."),
    ("wait", Kind.DURATION, "1m", "Wait window: a waiting loop looks once a window, SYNCs on news."),
    ("max_cost", Kind.USD, None, "Per-run subtree cost ceiling in USD (hard)."),
    ("max_iter_cost", Kind.USD, None, "Per-iteration cost cap in USD (soft); needs max_cost."),
    ("max_step_cost", Kind.USD, None, "Per-step cost cap in USD; needs max_cost."),
    ("reserve_budget", Kind.USD_RESERVE, None, "Wind-down buffer in USD; null = 10% of max_cost."),
    ("sync", Kind.FLAG, True, "Run the SYNC step before each work step and while waiting."),
    ("detached", Kind.FLAG, False, "Run every step as a fresh agent invocation."),
    ("local", Kind.FLAG, False, "Never push commits to origin."),
    ("user", Kind.FLAG, False, "This is the tree's user (root) node."),
    ("scope", Kind.PATHS, [], "Relative paths the node may commit to; empty = whole worktree."),
    ("exit_check", Kind.COMMAND, None, "Command run after each iteration; exit 0 completes."),
    ("check_timeout", Kind.DURATION, "10m", "Time limit of each exit check and gate command."),
    ("no_progress", Kind.COUNT, 2, "Same-signature red exit checks that end a run; null = off."),
    ("max_failed_iters", Kind.COUNT, 3, "Consecutive failed iterations that end a run; null = off."),
    ("on_usage_limit", Kind.CHOICE, "wait", "At a closed usage window: wait for it, or stop."),
    ("max_usage_wait", Kind.DURATION, "12h", "Longest usage-window wait before the run exits."),
    ("outage_backoff", Kind.DURATION, "30s", "First wait of a provider outage; each doubles."),
    ("max_outage_backoff", Kind.DURATION, "30m", "Longest single wait of a provider outage."),
    ("usage_pause_at", Kind.PERCENT, "95%", "Window use at which to wait early; null = off."),
    ("pass_score", Kind.SCORE, None, "Score a check must report to pass; null = exit code only."),
    ("min_gain", Kind.SCORE, 0.02, "Least score rise between exit checks that counts as progress."),
    ("stagnation", Kind.COUNT, 2, "Stalled scored exit checks in a row that end a run; null = off."),
)
NULL_DISABLES = frozenset({"no_progress", "max_failed_iters", "usage_pause_at", "stagnation"})
"""Keys whose explicit null means off; a missing key takes the default."""
CHOICES: Mapping[str, tuple[str, ...]] = {"on_usage_limit": ("wait", "stop")}

_RULES: dict[Kind, str] = {
    Kind.TEXT: "must be a string",
    Kind.COUNT: "must be a whole number >= 1",
    Kind.LIMIT: "must be a whole number >= 0",
    Kind.DURATION: 'must be a duration string such as "10m"',
    Kind.USD: "must be a USD amount > 0 and < 1e9",
    Kind.USD_RESERVE: "must be a USD amount >= 0 and < 1e9",
    Kind.FLAG: "must be true or false",
    Kind.PATHS: "must be a list of relative path strings",
    Kind.COMMAND: "must be a non-empty, single-line shell command string",
    Kind.PERCENT: 'must be a percentage such as "95%" (above 0%, at most 100%)',
    Kind.CHOICE: "must be one of the listed words",
    Kind.SCORE: "must be a score above 0 and at most 1",
}


def default_config() -> dict[str, object]:
    """Every key with its default, in schema order (a fresh dict with a fresh ``scope`` list)."""
    return {name: list(spec.default) if isinstance(spec.default, list) else spec.default
            for name, spec in KEYS.items()}


def unknown_keys(raw: Mapping[str, object]) -> list[str]:
    """The keys of ``raw`` that are not in the schema, sorted. They are kept, never an error."""
    return sorted(key for key in raw if key not in KEYS)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    """A finite int or float; ``bool`` is not a number here."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _show(value: object) -> str:
    """``value`` as it would appear in config.json (``true``, ``"3"``), for messages."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _problem(spec: KeySpec, value: object) -> str | None:
    """The problem with a non-null ``value`` for ``spec``, or None when it is valid."""
    kind, bad = spec.kind, f"{spec.name}: {_RULES[spec.kind]} (got {_show(value)})"
    if kind is Kind.TEXT:
        return None if isinstance(value, str) else bad
    if kind is Kind.COMMAND:
        return None if isinstance(value, str) and len(value.strip().splitlines()) == 1 else bad
    if kind in (Kind.COUNT, Kind.LIMIT):
        low = 1 if kind is Kind.COUNT else 0
        return None if _is_int(value) and low <= value <= _MAX_INT else bad
    if kind is Kind.DURATION:
        if not isinstance(value, str):
            return bad
        try:
            parse_duration(value, spec.name)
        except InvalidValue as exc:
            return str(exc)
        return None
    if kind in (Kind.USD, Kind.USD_RESERVE):
        if not _is_number(value):
            return bad
        if kind is Kind.USD and 0 < value < 0.0001:  # budgets keep 4 dp: it would round to 0
            return f"{spec.name}: must be at least $0.0001 (got {value})"
        return None if 1e9 > value > 0 or (kind is Kind.USD_RESERVE and value == 0) else bad
    if kind is Kind.FLAG:
        return None if isinstance(value, bool) else bad
    if kind is Kind.SCORE:  # a number in (0, 1]
        return None if _is_number(value) and 0 < value <= 1 else bad
    if kind is Kind.CHOICE:
        words = CHOICES[spec.name]
        return None if value in words else f"{spec.name}: must be one of " \
            f"{', '.join(words)} (got {_show(value)})"
    if kind is Kind.PERCENT:
        try:
            parse_pause_at(value)
        except ValueError:
            return bad
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return bad
    try:
        canonical = normalise_scope(value)
    except InvalidValue as exc:
        return str(exc)
    if list(canonical) != value:
        return (f"scope: entries must be canonical and unique; write {_show(list(canonical))} "
                f"(got {_show(value)})")
    return None


def validate_config(raw: Mapping[str, object]) -> list[str]:
    """Every problem in ``raw`` (a parsed config.json), one line each naming key and rule.

    Missing keys and ``null`` values take defaults; unknown keys are ignored (see
    ``unknown_keys``). Per-key rules follow ``KEYS``; ``bool`` is not a number; ints are
    accepted as USD. Cross-key rules: ``interval`` and ``sleep`` are mutually exclusive;
    ``iter_timeout`` may not exceed ``interval``; caps are ordered ``max_step_cost <=
    max_iter_cost <= max_cost``; ``max_iter_cost``, ``max_step_cost`` and ``reserve_budget``
    require ``max_cost``, which ``reserve_budget`` must stay under 99% of. ``[]``: valid."""
    problems: list[str] = []
    good: dict[str, Any] = {}
    for name, spec in KEYS.items():
        value = raw.get(name)
        if value is None:
            continue
        problem = _problem(spec, value)
        if problem is None:
            good[name] = parse_duration(str(value), name) if spec.kind is Kind.DURATION else value
        else:
            problems.append(problem)
    problems.extend(_cross_problems(good))
    return problems


def _cross_problems(good: Mapping[str, Any]) -> list[str]:
    """Rules between keys, checked only over keys whose own value is valid (durations in s)."""
    problems: list[str] = []
    if "interval" in good and "sleep" in good:
        problems.append("interval, sleep: are mutually exclusive; set only one")
    if "interval" in good and good.get("iter_timeout", 0) > good["interval"]:
        problems.append(f"iter_timeout: must not be longer than interval "
                        f"({good['iter_timeout']}s > {good['interval']}s)")
    max_cost = good.get("max_cost")
    for name in ("max_iter_cost", "max_step_cost", "reserve_budget"):
        if name in good and max_cost is None:
            problems.append(f"{name}: requires max_cost; set max_cost or clear {name}")
    order = [(n, good[n]) for n in ("max_step_cost", "max_iter_cost", "max_cost") if n in good]
    for (low, low_value), (high, high_value) in itertools.pairwise(order):
        if low_value > high_value:
            problems.append(f"{low}: must be <= {high} (got {low_value} > {high_value})")
    reserve = good.get("reserve_budget")
    if reserve is not None and max_cost is not None and reserve >= _RESERVE_SHARE * max_cost:
        problems.append(f"reserve_budget: must be under 99% of max_cost "
                        f"(got {reserve} with max_cost {max_cost})")
    return problems


@dataclass(frozen=True)
class NodeConfig:
    """A validated node configuration; durations are whole seconds, money is USD.

    Built by ``parse_config``. ``None`` means unset/unlimited; ``reserve_budget`` None means
    "derive 10% of max_cost"."""

    title: str | None = None
    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    effort: str | None = None
    base: str | None = None
    meta: str | None = None
    parent: str | None = None
    root: str | None = None
    max_iters: int | None = None
    max_depth: int | None = None
    max_children: int | None = None
    max_descendants: int | None = None
    step_retries: int = 1
    timeout: int | None = None
    iter_timeout: int | None = None
    step_timeout: int | None = None
    interval: int | None = None
    sleep: int | None = None
    step_retry_backoff: int = 10
    wait: int = 60
    max_cost: float | None = None
    max_iter_cost: float | None = None
    max_step_cost: float | None = None
    reserve_budget: float | None = None
    sync: bool = True
    detached: bool = False
    local: bool = False
    user: bool = False
    scope: tuple[str, ...] = ()
    exit_check: str | None = None
    check_timeout: int = 600
    no_progress: int | None = 2
    max_failed_iters: int | None = 3
    on_usage_limit: str = "wait"
    max_usage_wait: int = 43200
    outage_backoff: int = 30
    max_outage_backoff: int = 1800
    usage_pause_at: float | None = 0.95
    pass_score: float | None = None
    min_gain: float = 0.02
    stagnation: int | None = 2


def parse_config(raw: Mapping[str, object], source: str | None = None) -> NodeConfig:
    """Validate ``raw`` and build a ``NodeConfig``; missing or null keys take defaults
    (an explicit null for a ``NULL_DISABLES`` key stays None: off).

    ``source`` (e.g. the config.json path) is named in the error. Raises
    ``ConfigError(problems, source)`` listing every problem ``validate_config`` finds.
    """
    problems = validate_config(raw)
    if problems:
        raise ConfigError(problems, source)
    values: dict[str, Any] = {}
    for name, spec in KEYS.items():
        value = raw.get(name)
        if value is None and not (name in NULL_DISABLES and name in raw):
            value = spec.default
        if value is None:
            values[name] = None
        elif spec.kind is Kind.DURATION:
            values[name] = parse_duration(str(value), name)
        elif spec.kind in (Kind.USD, Kind.USD_RESERVE, Kind.SCORE):
            values[name] = float(value)  # type: ignore[arg-type]
        elif spec.kind is Kind.PERCENT:
            values[name] = parse_pause_at(value)
        elif isinstance(value, list):
            values[name] = tuple(value)
        else:
            values[name] = value
    return NodeConfig(**values)


_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLAGS = {"true": True, "false": False}


def coerce_value(key: str, text: str) -> object:
    """Turn a command-line string for ``key`` into the JSON value stored in config.json.

    ``null`` -> None for every key; whole numbers for counts and limits; finite numbers for
    USD keys; ``true``/``false`` (any case) for flags; durations are checked and kept as the
    stripped string; ``scope`` is a comma-separated list, normalised (``""`` -> ``[]``); text
    keys keep ``text`` unchanged. Cross-key rules are not checked here (``validate_config``).
    Raises ``InvalidValue`` naming the key and rule, or listing the valid keys if unknown."""
    spec = KEYS.get(key)
    if spec is None:
        raise InvalidValue(f"unknown config key {key!r}; valid keys: {', '.join(KEYS)}")
    stripped = text.strip()
    if stripped == "null":
        return None
    value: object = text
    if spec.kind in (Kind.COUNT, Kind.LIMIT):
        value = int(stripped) if _INT_TEXT.fullmatch(stripped) else stripped
    elif spec.kind in (Kind.USD, Kind.USD_RESERVE, Kind.SCORE):
        if spec.kind is Kind.USD_RESERVE and stripped.endswith("%"):
            raise InvalidValue(f'{key}: "{stripped}" is a share of max_cost; give a USD amount, '
                               "or pass the percentage to node init/update (--reserve-budget)")
        value = _float_or_text(stripped)
    elif spec.kind is Kind.FLAG:
        value = _FLAGS.get(stripped.lower(), stripped)
    elif spec.kind in (Kind.DURATION, Kind.CHOICE):
        value = stripped
    elif spec.kind is Kind.PERCENT:
        value = stripped if stripped.endswith("%") else _float_or_text(stripped)
    elif spec.kind is Kind.PATHS:
        return list(normalise_scope(stripped.split(","))) if stripped else []
    problem = _problem(spec, value)
    if problem is not None:
        raise InvalidValue(problem)
    return value


def _float_or_text(text: str) -> object:
    try:
        return float(text)
    except ValueError:
        return text
