"""The dashboard's detail line and gauge (fractal/domain/views/dashboard.py)."""

from __future__ import annotations

import pytest

from fractal.domain.views.dashboard import (
    Gauge,
    Level,
    Live,
    clock_label,
    gauge,
    live_detail,
    shown_agent,
    subtree_spends,
)

NOW = 10_000.0


@pytest.mark.parametrize(("seconds", "text"), [
    (-3, "0s"), (42, "42s"), (252, "4m12s"), (7500, "2h05m"), (273600, "3d04h")])
def test_clock_label(seconds: float, text: str) -> None:
    assert clock_label(seconds) == text


@pytest.mark.parametrize(("status", "live", "reason", "text"), [
    ("active", Live(3, 2, 10, 3, 5, "EXECUTE", NOW - 252), "",
     "run 3 · iter 2/10 · step 3/5 EXECUTE 4m12s"),
    ("active", Live(3, 2, None, 1, None, "PLAN", NOW - 5), "", "run 3 · iter 2/∞ · step 1 PLAN 5s"),
    ("active", Live(3, 1, 4, 2, 3, "REVIEW", NOW, gate=True), "",
     "run 3 · iter 1/4 · awaiting approval"),
    ("active", Live(3, 1, 4, signal="pausing"), "", "run 3 · iter 1/4 · pausing"),
    ("active", Live(), "", "booting"),
    # the same UTC day as NOW (1970-01-01T02:46:40Z): the time of day only
    ("active", Live(3, 2, 10, 1, 5, "WORK", NOW - 9, usage_wait=True,
                    usage_until=50_700.0), "",
     "run 3 · iter 2/10 · waiting for usage window until 14:05:00Z"),
    ("active", Live(3, 2, 10, 1, 5, "WORK", NOW - 9, usage_wait=True,
                    usage_until=50_705.0), "",
     "run 3 · iter 2/10 · waiting for usage window until 14:05:05Z"),
    # another day: dated, so a day-long wait never reads as one already past
    ("active", Live(3, 2, 10, 1, 5, "WORK", NOW - 9, usage_wait=True,
                    usage_until=1_767_276_305.0), "",
     "run 3 · iter 2/10 · waiting for usage window until 2026-01-01 14:05:05Z"),
    ("active", Live(3, usage_wait=True, usage_until=NOW + 86_400.0), "",
     "run 3 · waiting for usage window until 1970-01-02 02:46:40Z"),
    ("active", Live(3, usage_wait=True), "",  # no window closed: it follows another's probe
     "run 3 · waiting for usage window until another node's probe of it gets through"),
    ("active", Live(3, gone=True), "", "supervisor gone (any read heals it: the run parks, interrupted)"),
    ("paused", Live(3, gate=True), "", "parked · awaiting approval"),
    ("exited", Live(), "Exited at iteration 3.2", "Exited at iteration 3.2"),
])
def test_live_detail(status: str, live: Live, reason: str, text: str) -> None:
    assert live_detail(status, live, NOW, reason) == text


@pytest.mark.parametrize(("spent", "cap", "reserve", "expected"), [
    (1.0, None, None, None),
    (None, 10.0, None, Gauge(0.0, Level.OK)),
    (8.9, 10.0, None, Gauge(0.89, Level.OK)),
    (9.0, 10.0, None, Gauge(0.9, Level.RESERVE)),
    (7.0, 10.0, 3.0, Gauge(0.7, Level.RESERVE)),
    (10.0, 10.0, None, Gauge(1.0, Level.CAP)),
    (12.0, 10.0, None, Gauge(1.0, Level.CAP)),
])
def test_gauge(spent: float | None, cap: float | None, reserve: float | None,
               expected: Gauge | None) -> None:
    got = gauge(spent, cap, reserve)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.level is expected.level
        assert got.share == pytest.approx(expected.share)


# Runs: 1 the lead's (own 0.23), 2 and 3 its children's (0.10, 0.11), 4 a grandchild's
# with nothing priced, 5 a pool's run (no steps) over workers 6 and 7, 8 an unpriced run.
_PARENTS = {1: None, 2: 1, 3: 1, 4: 2, 5: None, 6: 5, 7: 5, 8: None}


@pytest.mark.parametrize(("own", "expected"), [
    ({1: 0.23, 2: 0.10, 3: 0.11, 4: None, 5: None, 6: 0.5, 7: 0.25, 8: None},
     {1: pytest.approx(0.44), 2: 0.10, 3: 0.11, 4: None, 5: 0.75, 6: 0.5, 7: 0.25, 8: None}),
    ({6: 0.5}, {1: None, 2: None, 3: None, 4: None, 5: 0.5, 6: 0.5, 7: None, 8: None}),
    ({}, dict.fromkeys(_PARENTS)),  # nothing known anywhere: unknown, never 0
    ({4: 0.0}, {1: 0.0, 2: 0.0, 3: None, 4: 0.0, 5: None, 6: None, 7: None, 8: None}),
])
def test_subtree_spends(own: dict[int, float | None],
                        expected: dict[int, float | None]) -> None:
    assert subtree_spends(_PARENTS, own) == expected


@pytest.mark.parametrize(("parents", "expected"), [
    ({1: 9, 2: 1}, {1: 3.0, 2: 2.0}),  # a parent outside the map: a top run
    ({1: 2, 2: 1}, {1: 3.0, 2: 2.0}),  # a link to a newer run is ignored
    ({1: 2, 2: 1, 3: 3}, {1: 3.0, 2: 2.0, 3: None}),  # so is one to itself
])
def test_subtree_spends_odd_links(parents: dict[int, int | None],
                                  expected: dict[int, float | None]) -> None:
    assert subtree_spends(parents, {1: 1.0, 2: 2.0}) == expected


@pytest.mark.parametrize(("pinned", "configured", "shown"), [
    (("codex", "codex"), ("claude", None), "codex"),    # in an iteration: what it pinned
    ((None, "./agent.sh"), (None, None), "./agent.sh"),  # between iterations: the run's
    ((None, None), ("codex", None), "claude"),          # a run booted with no setting
    (None, ("codex", "./tree-agent"), "codex"),         # settled or idle: its config's
    (None, (None, "./tree-agent"), "./tree-agent"),     # else the tree's default
    (None, (None, None), "claude"),                     # else what a run launches
])
def test_shown_agent_is_the_setting_for_every_node(
        pinned: tuple[str | None, str | None] | None,
        configured: tuple[str | None, str | None], shown: str) -> None:
    assert shown_agent(pinned, configured, "claude") == shown
