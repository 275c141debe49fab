"""The pure rules of ``make soak-tree``'s driver: its fault schedule and its tree's shape."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.soak.chaos import KINDS, MIN_EACH, TICK, schedule
from tests.soak.chaosdriver import fire_one
from tests.soak.chaostree import POOL_ITEMS, Shape, overlaps


@pytest.mark.parametrize("minutes", [0.5, 3, 5, 20])
def test_every_kind_is_scheduled_at_least_twice_early(minutes: float) -> None:
    ticks = int(minutes * 60 / TICK)
    plan = schedule("7", ticks)
    assert len(plan) == max(ticks, len(KINDS) * MIN_EACH)
    early = Counter(plan[:max(len(KINDS) * MIN_EACH, int(ticks * 0.6))])
    assert all(early[kind] >= MIN_EACH for kind in KINDS), early


def test_the_schedule_replays_from_its_seed() -> None:
    assert schedule("7", 300) == schedule("7", 300)
    assert schedule("7", 300) != schedule("8", 300)


@pytest.mark.parametrize(("a", "b", "touch"), [
    ("a", "a", True),
    ("a", "a.m0", True),
    ("a.m0.x", "a", True),
    ("a.m0", "a.m1", False),
    ("a", "ab", False),
    ("c.p", "c.p.i3", True),
    ("c.w", "c.p", False),
])
def test_overlapping_subtrees(a: str, b: str, touch: bool) -> None:
    assert overlaps(a, b) is touch
    assert overlaps(b, a) is touch


def test_the_tree_has_thirty_nodes_on_three_levels_and_a_pool() -> None:
    shape = Shape()
    names = shape.all()
    assert len(names) == len(set(names)) == 30
    assert {n.count(".") for n in names} == {0, 1, 2}
    assert len(shape.workers()) == POOL_ITEMS == 10
    assert all(shape.is_worker(w) for w in shape.workers())
    assert not any(shape.is_worker(n) for n in shape.planned())
    assert set(shape.mergers()) == {n for n in names if any(m.startswith(n + ".") for m in
                                                           names)} - {"c.p"}


def test_kinds_without_a_target_never_starve_the_others() -> None:
    """Three kinds that never find a target (no gate waiting, nothing paused, a window
    already closed) cycling through their retries still leave every tick a fault."""
    stuck = {"approve", "resume", "usage-window"}
    plan = schedule("298498418", 300)
    rng, deferred, fired = random.Random(1), Counter[str](), Counter[str]()
    for tick in range(300):
        kind = fire_one(plan, tick, lambda k: k not in stuck, rng, deferred)
        assert kind is not None and kind not in stuck
        fired[kind] += 1
    assert set(fired) == set(KINDS) - stuck


def test_a_tick_fires_nothing_only_when_nothing_can_act() -> None:
    plan, deferred = ["stop"], Counter[str]()
    assert fire_one(plan, 0, lambda k: False, random.Random(1), deferred) is None
    assert deferred == Counter({"stop": 1}) and plan.count("stop") == 2
