"""The node config schema: defaults, every per-key and cross-key rule, coercion, reserve."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fractal.domain.config import (
    KEYS,
    Kind,
    NodeConfig,
    coerce_value,
    default_config,
    normalise_scope,
    parse_config,
    resolve_reserve,
    unknown_keys,
    validate_config,
)
from fractal.domain.errors import ConfigError, InvalidValue

ALL_KEYS = [
    "title", "agent", "provider", "model", "effort", "base", "meta", "parent", "root",
    "max_iters", "max_depth", "max_children", "max_descendants", "step_retries",
    "timeout", "iter_timeout", "step_timeout", "interval", "sleep", "step_retry_backoff", "wait",
    "max_cost", "max_iter_cost", "max_step_cost", "reserve_budget",
    "sync", "detached", "local", "user", "scope", "exit_check", "check_timeout", "no_progress",
    "max_failed_iters", "on_usage_limit", "max_usage_wait", "outage_backoff",
    "max_outage_backoff", "usage_pause_at", "pass_score", "min_gain", "stagnation",
]


def test_schema_lists_every_key_once() -> None:
    assert list(KEYS) == ALL_KEYS
    assert all(spec.name == name and spec.doc for name, spec in KEYS.items())


def test_default_config() -> None:
    config = default_config()
    assert list(config) == ALL_KEYS
    assert config["step_retries"] == 1
    assert config["step_retry_backoff"] == "10s"
    assert config["wait"] == "1m"
    assert (config["sync"], config["detached"], config["local"], config["user"]) == (
        True, False, False, False)
    assert config["scope"] == []
    nulls = {k for k, v in config.items() if v is None}
    assert nulls == set(ALL_KEYS) - {"step_retries", "step_retry_backoff", "wait", "sync",
                                     "detached", "local", "user", "scope", "check_timeout",
                                     "no_progress", "max_failed_iters", "on_usage_limit",
                                     "max_usage_wait", "outage_backoff",
                                     "max_outage_backoff", "usage_pause_at", "min_gain",
                                     "stagnation"}
    assert (config["check_timeout"], config["no_progress"]) == ("10m", 2)
    assert validate_config(config) == []


def test_default_config_is_fresh() -> None:
    first = default_config()
    first["scope"].append("src")  # type: ignore[attr-defined]
    assert default_config()["scope"] == []


def test_parse_defaults() -> None:
    assert parse_config({}) == NodeConfig()
    assert parse_config(default_config()) == NodeConfig()
    config = parse_config({})
    assert (config.step_retry_backoff, config.wait, config.step_retries) == (10, 60, 1)


def test_parse_typed_values() -> None:
    config = parse_config({
        "title": "parser", "max_iters": 5, "max_depth": 0, "timeout": "1.5h",
        "iter_timeout": "10m", "interval": "10m", "step_timeout": "90s", "max_cost": 10,
        "max_iter_cost": 2.5, "max_step_cost": 1, "reserve_budget": 0, "sync": False,
        "scope": ["src", "tests/unit"], "step_retry_backoff": None, "unknown_key": [1, 2],
    }, source="config.json")
    assert config.title == "parser"
    assert (config.max_iters, config.max_depth) == (5, 0)
    assert (config.timeout, config.iter_timeout, config.interval, config.step_timeout) == (
        5400, 600, 600, 90)
    assert config.sleep is None
    assert config.step_retry_backoff == 10  # null takes the default
    assert config.max_cost == 10.0 and isinstance(config.max_cost, float)
    assert config.max_step_cost == 1.0 and isinstance(config.max_step_cost, float)
    assert config.reserve_budget == 0.0
    assert config.sync is False
    assert config.scope == ("src", "tests/unit")


# Single-key rules: (key, bad value, fragment of the one problem).
@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("title", 5, "title: must be a string (got 5)"),
    ("agent", ["claude"], "agent: must be a string"),
    ("max_iters", 0, "max_iters: must be a whole number >= 1 (got 0)"),
    ("max_iters", -1, "max_iters: must be a whole number >= 1"),
    ("max_iters", 1.5, "max_iters: must be a whole number >= 1 (got 1.5)"),
    ("max_iters", 2.0, "max_iters: must be a whole number >= 1 (got 2.0)"),
    ("max_iters", True, "max_iters: must be a whole number >= 1 (got true)"),
    ("max_iters", "3", "max_iters: must be a whole number >= 1 (got \"3\")"),
    ("max_iters", 2**63, "max_iters: must be a whole number >= 1"),
    ("max_depth", -1, "max_depth: must be a whole number >= 0 (got -1)"),
    ("max_children", False, "max_children: must be a whole number >= 0"),
    ("max_descendants", "", "max_descendants: must be a whole number >= 0"),
    ("step_retries", -2, "step_retries: must be a whole number >= 0"),
    ("timeout", 600, 'timeout: must be a duration string such as "10m" (got 600)'),
    ("timeout", "10", 'timeout: "10" needs a unit'),
    ("iter_timeout", "0s", 'iter_timeout: "0s" is shorter than one second'),
    ("step_timeout", "-1m", "step_timeout: \"-1m\" must not be negative"),
    ("interval", "5 m", "interval: \"5 m\" must not contain spaces"),
    ("sleep", "1y", 'sleep: "1y" has unknown unit'),
    ("step_retry_backoff", "", "step_retry_backoff: empty duration"),
    ("wait", True, "wait: must be a duration string"),
    ("max_cost", 0, "max_cost: must be a USD amount > 0 and < 1e9 (got 0)"),
    ("max_cost", -5, "max_cost: must be a USD amount > 0"),
    ("max_cost", "10", "max_cost: must be a USD amount > 0 and < 1e9 (got \"10\")"),
    ("max_cost", True, "max_cost: must be a USD amount > 0 and < 1e9 (got true)"),
    ("max_cost", math.inf, "max_cost: must be a USD amount > 0 and < 1e9 (got Infinity)"),
    ("max_cost", math.nan, "max_cost: must be a USD amount > 0 and < 1e9 (got NaN)"),
    ("reserve_budget", -0.01, "reserve_budget: must be a USD amount >= 0"),
    ("max_cost", 0.00001, "max_cost: must be at least $0.0001 (got 1e-05)"),
    ("max_cost", 1e308, "max_cost: must be a USD amount > 0 and < 1e9 (got 1e+308)"),
    ("sync", "true", "sync: must be true or false (got \"true\")"),
    ("detached", 1, "detached: must be true or false (got 1)"),
    ("local", 0, "local: must be true or false"),
    ("user", "yes", "user: must be true or false"),
    ("scope", "src", "scope: must be a list of relative path strings (got \"src\")"),
    ("scope", ["src", 3], "scope: must be a list of relative path strings"),
    ("scope", ["/abs"], 'scope: "/abs" is absolute'),
    ("scope", ["src/../etc"], 'scope: "src/../etc" has a ".." segment'),
    ("scope", [""], 'scope: "" is empty'),
    ("scope", ["."], 'scope: "." is empty or the worktree root'),
    ("scope", ["src tests"], 'scope: "src tests" contains whitespace'),
    ("scope", ["./src/"], "scope: entries must be canonical and unique; write [\"src\"]"),
    ("scope", ["src", "src"], "scope: entries must be canonical and unique; write [\"src\"]"),
    ("exit_check", "", "exit_check: must be a non-empty, single-line shell command string (got \"\")"),
    ("exit_check", "   ", "exit_check: must be a non-empty, single-line shell command string"),
    ("exit_check", "pytest\nruff check", "exit_check: must be a non-empty, single-line"),
    ("exit_check", ["pytest"], "exit_check: must be a non-empty, single-line shell command string"),
    ("check_timeout", "10", 'check_timeout: "10" needs a unit'),
    ("no_progress", 0, "no_progress: must be a whole number >= 1 (got 0)"),
    ("no_progress", True, "no_progress: must be a whole number >= 1"),
])
def test_single_key_problem(key: str, value: object, fragment: str) -> None:
    problems = validate_config({key: value})
    assert len(problems) == 1, problems
    assert fragment in problems[0]
    with pytest.raises(ConfigError) as info:
        parse_config({key: value}, source="/n/config.json")
    assert info.value.problems == problems
    assert info.value.source == "/n/config.json"
    assert "/n/config.json" in str(info.value)


@pytest.mark.parametrize(("raw", "fragments"), [
    # interval and sleep are mutually exclusive.
    ({"interval": "10m", "sleep": "1m"}, ["interval, sleep: are mutually exclusive"]),
    # iter_timeout longer than interval is refused; equal or shorter is fine.
    ({"interval": "10m", "iter_timeout": "11m"},
     ["iter_timeout: must not be longer than interval (660s > 600s)"]),
    ({"interval": "10m", "iter_timeout": "10m"}, []),
    ({"interval": "10m", "iter_timeout": "5m"}, []),
    ({"iter_timeout": "2h"}, []),
    # Caps need max_cost.
    ({"max_iter_cost": 1}, ["max_iter_cost: requires max_cost"]),
    ({"max_step_cost": 1}, ["max_step_cost: requires max_cost"]),
    ({"reserve_budget": 1}, ["reserve_budget: requires max_cost"]),
    ({"max_iter_cost": 1, "max_step_cost": 0.5},
     ["max_iter_cost: requires max_cost", "max_step_cost: requires max_cost"]),
    # Caps are ordered max_step_cost <= max_iter_cost <= max_cost.
    ({"max_cost": 10, "max_iter_cost": 11}, ["max_iter_cost: must be <= max_cost (got 11 > 10)"]),
    ({"max_cost": 10, "max_step_cost": 11}, ["max_step_cost: must be <= max_cost (got 11 > 10)"]),
    ({"max_cost": 10, "max_iter_cost": 2, "max_step_cost": 3},
     ["max_step_cost: must be <= max_iter_cost (got 3 > 2)"]),
    ({"max_cost": 10, "max_iter_cost": 10, "max_step_cost": 10}, []),
    ({"max_cost": 10, "max_iter_cost": 5, "max_step_cost": 1}, []),
    ({"max_cost": 1, "max_iter_cost": 5, "max_step_cost": 9},
     ["max_step_cost: must be <= max_iter_cost", "max_iter_cost: must be <= max_cost"]),
    # Reserve stays under 99% of max_cost.
    ({"max_cost": 100, "reserve_budget": 99}, ["reserve_budget: must be under 99% of max_cost"]),
    ({"max_cost": 100, "reserve_budget": 150}, ["reserve_budget: must be under 99% of max_cost"]),
    ({"max_cost": 100, "reserve_budget": 98.99}, []),
    ({"max_cost": 100, "reserve_budget": 0}, []),
    # Cross rules skip keys whose own value is already a problem (one problem each).
    ({"interval": "bad", "sleep": "1m"}, ['interval: "bad"']),
    ({"max_cost": -1, "max_iter_cost": 5}, ["max_cost: must be a USD amount > 0",
                                            "max_iter_cost: requires max_cost"]),
])
def test_cross_key_rules(raw: dict[str, Any], fragments: list[str]) -> None:
    problems = validate_config(raw)
    assert len(problems) == len(fragments), problems
    for fragment in fragments:
        assert any(fragment in p for p in problems), (fragment, problems)


def test_every_problem_is_reported_at_once() -> None:
    problems = validate_config({"max_iters": 0, "sync": "no", "timeout": "10",
                                "interval": "1m", "sleep": "1m", "max_step_cost": 2})
    assert len(problems) == 5
    assert [p.split(":")[0] for p in problems] == [
        "max_iters", "timeout", "sync", "interval, sleep", "max_step_cost"]


def test_unknown_keys_are_not_problems() -> None:
    raw = {"zeta": 1, "max_iters": 2, "alpha": None, "project": "x"}
    assert validate_config(raw) == []
    assert unknown_keys(raw) == ["alpha", "project", "zeta"]
    assert unknown_keys(default_config()) == []


@pytest.mark.parametrize(("key", "text", "expected"), [
    ("title", "A title, with commas", "A title, with commas"),
    ("model", "null", None),
    ("max_iters", "null", None),
    ("sync", " null ", None),
    ("max_iters", "5", 5),
    ("max_iters", " 7 ", 7),
    ("max_depth", "0", 0),
    ("step_retries", "+2", 2),
    ("max_cost", "10", 10.0),
    ("max_cost", "2.5", 2.5),
    ("reserve_budget", "0", 0.0),
    ("sync", "true", True),
    ("detached", "false", False),
    ("local", "TRUE", True),
    ("timeout", " 1.5h ", "1.5h"),
    ("wait", "30s", "30s"),
    ("scope", "./src/, tests//unit ,src", ["src", "tests/unit"]),
    ("scope", "src", ["src"]),
    ("scope", "", []),
    ("scope", "null", None),
    ("exit_check", "pytest -q tests/", "pytest -q tests/"),
    ("exit_check", "null", None),
    ("check_timeout", "90s", "90s"),
    ("no_progress", "3", 3),
    ("no_progress", "null", None),
])
def test_coerce_value(key: str, text: str, expected: object) -> None:
    value = coerce_value(key, text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(("key", "text", "fragment"), [
    ("max_iters", "0", "max_iters: must be a whole number >= 1 (got 0)"),
    ("max_iters", "1.5", "max_iters: must be a whole number >= 1"),
    ("max_iters", "ten", "max_iters: must be a whole number >= 1 (got \"ten\")"),
    ("max_depth", "-1", "max_depth: must be a whole number >= 0"),
    ("max_depth", str(2**63), "max_depth: must be a whole number >= 0"),
    ("max_cost", "0", "max_cost: must be a USD amount > 0"),
    ("max_cost", "abc", "max_cost: must be a USD amount > 0"),
    ("max_cost", "nan", "max_cost: must be a USD amount > 0"),
    ("max_cost", "inf", "max_cost: must be a USD amount > 0"),
    ("reserve_budget", "-1", "reserve_budget: must be a USD amount >= 0"),
    ("reserve_budget", "10%", 'reserve_budget: "10%" is a share of max_cost'),
    ("sync", "yes", "sync: must be true or false"),
    ("sync", "1", "sync: must be true or false"),
    ("timeout", "10", 'timeout: "10" needs a unit'),
    ("step_timeout", "0s", "step_timeout: "),
    ("scope", "/etc", 'scope: "/etc" is absolute'),
    ("scope", "src,,tests", 'scope: "" is empty'),
    ("scope", "../up", 'scope: "../up" has a ".." segment'),
    ("exit_check", " ", "exit_check: must be a non-empty, single-line shell command string"),
    ("no_progress", "0", "no_progress: must be a whole number >= 1"),
    ("nope", "1", "unknown config key 'nope'; valid keys: title, agent,"),
])
def test_coerce_value_refuses(key: str, text: str, fragment: str) -> None:
    with pytest.raises(InvalidValue) as info:
        coerce_value(key, text)
    assert fragment in str(info.value)


def test_coerce_unknown_key_lists_every_key() -> None:
    with pytest.raises(InvalidValue) as info:
        coerce_value("max_costs", "1")
    assert all(key in str(info.value) for key in ALL_KEYS)


def _as_cli_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


@pytest.mark.parametrize("key", [k for k in ALL_KEYS if KEYS[k].default is not None])
def test_coerced_defaults_round_trip(key: str) -> None:
    default = KEYS[key].default
    assert coerce_value(key, _as_cli_text(default)) == default


@pytest.mark.parametrize(("text", "max_cost", "expected"), [
    ("10%", 100.0, 10.0),
    ("10%", 12.34567, 1.2346),
    (" 5 % ", 10.0, 0.5),
    ("0%", 10.0, 0.0),
    ("2.5", None, 2.5),
    ("2.5", 100.0, 2.5),
    ("1.23456", None, 1.2346),
    ("0", None, 0.0),
])
def test_resolve_reserve(text: str, max_cost: float | None, expected: float) -> None:
    assert resolve_reserve(text, max_cost) == expected


@pytest.mark.parametrize(("text", "max_cost", "fragment"), [
    ("10%", None, "is a percentage but max_cost is not set"),
    ("-1", 10.0, "must be a USD amount >= 0"),
    ("-5%", 10.0, "must be a USD amount >= 0"),
    ("abc", 10.0, "must be a USD amount >= 0"),
    ("%", 10.0, "must be a USD amount >= 0"),
    ("", 10.0, "must be a USD amount >= 0"),
    ("nan", 10.0, "must be a USD amount >= 0"),
])
def test_resolve_reserve_refuses(text: str, max_cost: float | None, fragment: str) -> None:
    with pytest.raises(InvalidValue, match=r"^reserve_budget: ") as info:
        resolve_reserve(text, max_cost)
    assert fragment in str(info.value)


@pytest.mark.parametrize(("entries", "expected"), [
    (["./src/"], ("src",)),
    (["src", "./src", "src/"], ("src",)),
    (["a//b/./c/"], ("a/b/c",)),
    ([" docs "], ("docs",)),
    (["b", "a"], ("b", "a")),  # order kept
    ([], ()),
    (["..hidden/x"], ("..hidden/x",)),  # only a whole ".." segment is refused
])
def test_normalise_scope(entries: list[str], expected: tuple[str, ...]) -> None:
    assert normalise_scope(entries) == expected


@pytest.mark.parametrize(("entries", "fragment"), [
    (["/abs/path"], "is absolute"),
    (["  /abs"], "is absolute"),
    (["a/../b"], '".." segment'),
    ([".."], '".." segment'),
    ([""], "is empty"),
    (["./"], "is empty"),
    (["//"], "is absolute"),
    (["a b"], "contains whitespace"),
])
def test_normalise_scope_refuses(entries: list[str], fragment: str) -> None:
    with pytest.raises(InvalidValue, match=r"^scope: ") as info:
        normalise_scope(entries)
    assert fragment in str(info.value)


def test_kinds_cover_schema() -> None:
    kinds = {spec.kind for spec in KEYS.values()}
    assert kinds == set(Kind)


@pytest.mark.parametrize(("raw", "exit_check", "check_timeout", "no_progress"), [
    ({}, None, 600, 2),                                  # missing keys: the defaults
    ({"exit_check": None, "check_timeout": None}, None, 600, 2),
    ({"exit_check": "make test", "check_timeout": "90s", "no_progress": 3}, "make test", 90, 3),
    ({"no_progress": None}, None, 600, None),            # an explicit null disables the stop
])
def test_check_keys(raw: dict[str, Any], exit_check: str | None, check_timeout: int,
                    no_progress: int | None) -> None:
    config = parse_config(raw)
    assert (config.exit_check, config.check_timeout, config.no_progress) == (
        exit_check, check_timeout, no_progress)


@pytest.mark.parametrize(("raw", "field", "value"), [
    ({}, "max_failed_iters", 3),
    ({"max_failed_iters": None}, "max_failed_iters", None),
    ({"max_failed_iters": 5}, "max_failed_iters", 5),
    ({}, "on_usage_limit", "wait"),
    ({"on_usage_limit": "stop"}, "on_usage_limit", "stop"),
    ({}, "max_usage_wait", 43200),
    ({"max_usage_wait": "30m"}, "max_usage_wait", 1800),
    ({}, "outage_backoff", 30),
    ({"outage_backoff": "5s"}, "outage_backoff", 5),
    ({}, "max_outage_backoff", 1800),
    ({"max_outage_backoff": "2h"}, "max_outage_backoff", 7200),
    ({}, "usage_pause_at", 0.95),
    ({"usage_pause_at": None}, "usage_pause_at", None),
    ({"usage_pause_at": "80%"}, "usage_pause_at", 0.8),
    ({"usage_pause_at": 0.5}, "usage_pause_at", 0.5),
])
def test_unattended_keys(raw: dict[str, object], field: str, value: object) -> None:
    assert getattr(parse_config(raw), field) == value


@pytest.mark.parametrize(("raw", "fragment"), [
    ({"on_usage_limit": "retry"}, "on_usage_limit: must be one of wait, stop"),
    ({"usage_pause_at": "95"}, "usage_pause_at: must be a percentage"),
    ({"usage_pause_at": "150%"}, "usage_pause_at: must be a percentage"),
    ({"max_failed_iters": 0}, "max_failed_iters: must be a whole number >= 1"),
    ({"max_usage_wait": "soon"}, "max_usage_wait"),
])
def test_unattended_keys_refused(raw: dict[str, object], fragment: str) -> None:
    assert any(fragment in p for p in validate_config(raw))


@pytest.mark.parametrize(("key", "text", "value"), [
    ("usage_pause_at", "90%", "90%"), ("usage_pause_at", "0.9", 0.9),
    ("usage_pause_at", "null", None), ("on_usage_limit", " stop ", "stop"),
])
def test_unattended_keys_from_the_command_line(key: str, text: str, value: object) -> None:
    assert coerce_value(key, text) == value


@pytest.mark.parametrize(("raw", "expected"), [
    ({}, (None, 0.02, 2)),
    ({"pass_score": 0.8, "min_gain": 0.05, "stagnation": 3}, (0.8, 0.05, 3)),
    ({"pass_score": 1, "stagnation": None}, (1.0, 0.02, None)),
])
def test_score_keys(raw: dict[str, object], expected: tuple[object, ...]) -> None:
    config = parse_config(raw)
    assert (config.pass_score, config.min_gain, config.stagnation) == expected


@pytest.mark.parametrize("raw", [{"pass_score": 0}, {"pass_score": 1.5}, {"pass_score": "A=0.8"},
                                 {"min_gain": -0.1}, {"stagnation": 0}, {"pass_score": True}])
def test_bad_score_keys(raw: dict[str, object]) -> None:
    assert len(validate_config(raw)) == 1


def test_score_keys_from_the_command_line() -> None:
    assert coerce_value("pass_score", " 0.8 ") == 0.8
    with pytest.raises(InvalidValue, match="pass_score: must be a score above 0"):
        coerce_value("pass_score", "high")
