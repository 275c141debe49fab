"""The tighten-only rule of a node's own config (``domain.selflimits``): every key's
direction stated independently, a table of changes each judged tighter or looser, the
refusal's words, the gates a run holds, and the ceiling a run enforces against its
record (``budget.enforced_caps``)."""

from __future__ import annotations

from typing import Any

import pytest

from fractal.domain.budget import Caps, caps_of, enforced_caps
from fractal.domain.config import KEYS, parse_config
from fractal.domain.gates import gates_note, gates_of, unapproved_gate
from fractal.domain.selflimits import TIGHTER, Tighter, direction, loosenings, refusal

L, H, F, X = Tighter.LOWER, Tighter.HIGHER, Tighter.FREE, Tighter.LOCKED
DIRECTIONS: dict[str, Tighter] = {  # the table, stated independently of the module
    "title": F, "agent": X, "provider": X, "model": X, "effort": F, "base": X, "meta": X,
    "parent": X, "root": X, "max_iters": L, "max_depth": L, "max_children": L,
    "max_descendants": L, "step_retries": L, "timeout": L, "iter_timeout": L,
    "step_timeout": L, "interval": X, "sleep": H, "step_retry_backoff": H, "wait": F,
    "max_cost": L, "max_iter_cost": L, "max_step_cost": L, "reserve_budget": L, "sync": X,
    "detached": F, "local": Tighter.ON, "user": X, "scope": Tighter.SUBSET, "exit_check": X,
    "check_timeout": L, "no_progress": L, "max_failed_iters": L,
    "on_usage_limit": Tighter.ORDER, "max_usage_wait": L, "outage_backoff": H,
    "max_outage_backoff": H, "usage_pause_at": L, "pass_score": H, "min_gain": H,
    "stagnation": L,
}


def test_every_config_key_has_a_direction() -> None:
    assert dict(TIGHTER) == DIRECTIONS
    assert set(TIGHTER) == set(KEYS)  # a new key must be classified here and above


def test_an_unclassified_key_is_locked() -> None:
    assert direction("sandbox_of_the_future") is Tighter.LOCKED


BASE: dict[str, Any] = {"max_cost": 1.0, "max_iters": 5, "step_timeout": "10m",
                        "scope": ["src"], "exit_check": "make test", "interval": "1h",
                        "pass_score": 0.5}

# (change to BASE, the keys it loosens): () means a tightening (or no limit moved)
CHANGES: list[tuple[dict[str, Any], tuple[str, ...]]] = [
    ({"max_cost": 0.5}, ()),
    ({"max_cost": 2.0}, ("max_cost", "reserve_budget")),
    ({"max_cost": None}, ("max_cost", "reserve_budget")),
    ({"max_iter_cost": 0.0001}, ()),  # a lower iteration cap: allowed (gates still hold)
    ({"max_iters": 1}, ()),
    ({"max_iters": 9}, ("max_iters",)),
    ({"max_iters": None}, ("max_iters",)),
    ({"max_depth": 0, "max_children": 0}, ()),
    ({"step_retries": 0}, ()),
    ({"step_retries": 2}, ("step_retries",)),  # unset reads as 1
    ({"step_timeout": "1m"}, ()),
    ({"step_timeout": None}, ("step_timeout",)),
    ({"timeout": "2h"}, ()),
    ({"iter_timeout": "30m"}, ()),  # under the interval's wall
    ({"interval": "2h"}, ("iter_timeout", "interval")),  # its wall follows
    ({"reserve_budget": 0.5}, ()),  # a larger reserve leaves less before it
    ({"reserve_budget": 0.0}, ("reserve_budget",)),
    ({"scope": ["src/a", "src/b"]}, ()),
    ({"scope": ["src", "docs"]}, ("scope",)),
    ({"scope": []}, ("scope",)),
    ({"local": True}, ()),
    ({"on_usage_limit": "stop"}, ()),
    ({"interval": None}, ("iter_timeout", "interval")),
    ({"pass_score": 0.9}, ()),
    ({"pass_score": None}, ("pass_score",)),
    ({"min_gain": 0.01}, ("min_gain",)),
    ({"no_progress": None}, ("no_progress",)),
    ({"usage_pause_at": "80%"}, ()),
    ({"usage_pause_at": None}, ("usage_pause_at",)),
    ({"exit_check": "true"}, ("exit_check",)),
    ({"model": "cheap"}, ("model",)),
    ({"agent": "/bin/sh"}, ("agent",)),
    ({"sync": False}, ("sync",)),
    ({"title": "anything", "effort": "high", "wait": "5m", "detached": True}, ()),
]


@pytest.mark.parametrize(("change", "loosened"), CHANGES,
                         ids=[",".join(f"{k}={v}" for k, v in c.items()) for c, _ in CHANGES])
def test_a_change_is_judged_by_its_effective_values(change: dict[str, Any],
                                                    loosened: tuple[str, ...]) -> None:
    before = parse_config(BASE)
    after = parse_config({**BASE, **change})
    assert tuple(f.key for f in loosenings(before, after)) == loosened


@pytest.mark.parametrize(("before", "after", "loosened"), [
    ({"local": True}, {"local": False}, ("local",)),
    ({"on_usage_limit": "stop"}, {"on_usage_limit": "wait"}, ("on_usage_limit",)),
    ({"scope": []}, {"scope": ["src"]}, ()),
    ({"sleep": "1m"}, {"sleep": "10s"}, ("sleep",)),
    ({"sleep": None}, {"sleep": "10s"}, ()),
    ({"max_cost": 1.0, "reserve_budget": 0.1}, {"max_cost": 0.5, "reserve_budget": None}, ()),
])
def test_flags_words_lists_and_the_reserve(before: dict[str, Any], after: dict[str, Any],
                                           loosened: tuple[str, ...]) -> None:
    assert tuple(f.key for f in loosenings(parse_config(before), parse_config(after))) == \
        loosened


@pytest.mark.parametrize(("node", "who"), [
    ("main.lead.a", "only main.lead (its parent), an ancestor or the operator at the root "
                    "may raise max_cost (a node may only lower its own max_cost)"),
    ("main.a", "only the operator at the root may raise max_cost"),
])
def test_the_refusal_names_who_may_and_how(node: str, who: str) -> None:
    found = loosenings(parse_config(BASE), parse_config({**BASE, "max_cost": None}))
    text = refusal(node, node.rpartition(".")[0], "main", found)
    assert text.startswith(f"{node} may only tighten its own limits: max_cost would raise "
                           "(max_cost 1.0 -> unset)")
    assert who in text
    assert f"`fractal node config set --node {node} max_cost=...`" in text


def test_a_locked_key_says_it_cannot_be_changed() -> None:
    found = loosenings(parse_config(BASE), parse_config({**BASE, "exit_check": "true"}))
    assert "a node may not change its own exit_check" in refusal("main.a.b", "main.a", "main",
                                                                 found)


def test_gates_round_trip_and_the_first_never_approved() -> None:
    assert gates_of(gates_note(("PLAN", "EXECUTE"))) == ("PLAN", "EXECUTE")
    assert gates_of("") == ()
    assert unapproved_gate(("PLAN", "EXECUTE"), {"PLAN"}) == "EXECUTE"
    assert unapproved_gate(("PLAN",), {"PLAN", "OTHER"}) is None
    assert unapproved_gate((), set()) is None


@pytest.mark.parametrize(("live", "recorded", "held"), [
    (caps_of(1.0, None, None, None), 1.0, caps_of(1.0, None, None, None)),
    (caps_of(0.5, None, None, None), 1.0, caps_of(0.5, None, None, None)),  # lowered: kept
    (caps_of(None, None, None, None), 0.05, caps_of(0.05, None, None, None)),  # cleared
    (caps_of(5.0, 0.5, None, 0.5), 1.0, Caps(1.0, 0.5, None, 0.5)),  # raised by hand
    (caps_of(5.0, None, None, 2.0), 1.0, Caps(1.0, None, None, 0.1)),  # reserve won't fit
    (caps_of(5.0, None, None, None), None, caps_of(5.0, None, None, None)),  # no record
])
def test_a_run_enforces_at_most_its_recorded_ceiling(live: Caps, recorded: float | None,
                                                     held: Caps) -> None:
    assert enforced_caps(live, recorded) == held
