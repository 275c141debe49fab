"""The tree protocol's pure rules: who may spawn, the variables the tree mode shows, the
SYNC digest's wording and the ``wait: children`` seed."""

from __future__ import annotations

import pytest

from fractal.domain.digest import Digest, render_digest
from fractal.domain.nodeinit import with_children_wait
from fractal.domain.spawncaps import budget_share, child_caps, inherited_depth, tree_depth
from fractal.domain.variables import TreeFacts, may_spawn, tree_variables
from fractal.domain.waits import waits_for_children


@pytest.mark.parametrize(("children", "depth", "expected"), [
    (None, None, True), (2, 1, True), (0, None, False), (None, 0, False), (3, 0, False),
])
def test_may_spawn(children: int | None, depth: int | None, expected: bool) -> None:
    assert may_spawn(children, depth) is expected


@pytest.mark.parametrize(("facts", "expected"), [
    (TreeFacts(0, None, None, None, 0.0, ()),
     {"CHILDREN_LEFT": "unlimited", "DEPTH_LEFT": "unlimited", "BUDGET_LEFT": "unlimited",
      "GATED_STEPS": "none", "SPAWN_CAPS": "--max-children 4 --max-depth 1"}),
    (TreeFacts(1, 3, 2, 5.0, 1.25, ("EXECUTE",)),
     {"CHILDREN_LEFT": "2", "DEPTH_LEFT": "2", "BUDGET_LEFT": "$3.75 of $5.00",
      "GATED_STEPS": "EXECUTE",
      "SPAWN_CAPS": "--max-children 4 --max-depth 1 --max-cost 1.25"}),
    (TreeFacts(4, 3, 1, 2.0, 9.0, ("PLAN", "EXECUTE")),
     {"CHILDREN_LEFT": "0", "DEPTH_LEFT": "1", "BUDGET_LEFT": "$0.00 of $2.00",
      "GATED_STEPS": "PLAN, EXECUTE",
      "SPAWN_CAPS": "--max-children 0 --max-depth 0 --max-cost 0.00"}),
])
def test_tree_variables(facts: TreeFacts, expected: dict[str, str]) -> None:
    assert tree_variables(facts) == expected


@pytest.mark.parametrize(("root_config", "expected"), [
    ({}, 2), ({"max_depth": None}, None), ({"max_depth": 3}, 3), ({"max_depth": 0}, 0),
    ({"max_depth": "deep"}, 2), ({"max_depth": True}, 2), ({"max_depth": -1}, 2),
])
def test_the_trees_depth(root_config: dict[str, object], expected: int | None) -> None:
    assert tree_depth(root_config) == expected


@pytest.mark.parametrize(("parent_levels", "expected"), [
    (2, 1), (1, 0), (0, 0), (None, None),
])
def test_a_child_inherits_its_parents_levels_minus_one(parent_levels: int | None,
                                                       expected: int | None) -> None:
    assert inherited_depth(parent_levels) == expected


@pytest.mark.parametrize(("remaining", "max_children", "expected"), [
    (10.0, None, 2.5), (10.0, 3, 3.33), (10.0, 0, 2.5), (1.0, 4, 0.25), (0.05, None, 0.01),
    (0.0, 2, 0.0), (-1.0, 2, 0.0),
])
def test_the_budget_share(remaining: float, max_children: int | None,
                          expected: float) -> None:
    assert budget_share(remaining, max_children) == expected


@pytest.mark.parametrize(("depth_left", "remaining", "max_children", "expected"), [
    (2, 8.0, None, "--max-children 4 --max-depth 1 --max-cost 2.00"),
    (1, 8.0, 2, "--max-children 0 --max-depth 0 --max-cost 4.00"),
    (None, None, None, "--max-children 4 --max-depth 1"),
])
def test_the_spawn_templates_caps(depth_left: int | None, remaining: float | None,
                                  max_children: int | None, expected: str) -> None:
    assert child_caps(depth_left, remaining, max_children) == expected


@pytest.mark.parametrize(("fields", "expected"), [
    ({"wait": "children"}, True), ({"wait": " Children "}, True), ({"wait": "gates"}, False),
    ({}, False),
])
def test_waits_for_children(fields: dict[str, str], expected: bool) -> None:
    assert waits_for_children(fields) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("## Review\n", "---\nwait: children\n---\n## Review\n"),
    ("---\nrequires_approval: true\n---\nbody\n",
     "---\nrequires_approval: true\nwait: children\n---\nbody\n"),
    ("---\nwait: nothing\n---\nbody\n", "---\nwait: children\n---\nbody\n"),
])
def test_with_children_wait(text: str, expected: str) -> None:
    assert with_children_wait(text) == expected


def test_the_digest_says_what_changed_and_how_to_act() -> None:
    text = render_digest(Digest(
        notices=[("ops", "run completed: all done"), ("div", "EXECUTE awaits approval: "
                                                              "fractal node approve main.l.div 7")],
        gates=[("div", "EXECUTE", 7)], unread=5,
        subjects=["newest", "second", "third", "fourth"]))
    assert text.splitlines() == [
        "### Since the last SYNC", "",
        "- Child notices (2, from `$FRACTAL_BIN radio feed`):",
        "  - ops: run completed: all done",
        "  - div: EXECUTE awaits approval: fractal node approve main.l.div 7",
        "- Gates pending (1):",
        "  - div EXECUTE (step 7): review `$FRACTAL_BIN node diff div`, then "
        "`$FRACTAL_BIN node approve div`",
        '- Unread messages: 5 (newest: "newest"; "second"; "third"); read them with '
        "`$FRACTAL_BIN radio messages`."]


def test_a_quiet_digest() -> None:
    assert render_digest(Digest()).splitlines()[2:] == [
        "- Child notices: none.", "- Gates pending: none.", "- Unread messages: none."]


def test_a_waiting_digest_names_every_child_with_its_state_and_move() -> None:
    from fractal.domain.states import Status
    from fractal.domain.waits import WaitingChild

    kids = [WaitingChild("main.l.wrap", Status.IDLE, never_started=True),
            WaitingChild("main.l.div", Status.ACTIVE, gate_pending=True),
            WaitingChild("main.l.ops", Status.ACTIVE),
            WaitingChild("main.l.cat", Status.ACTIVE, handed_back=True),
            WaitingChild("main.l.log", Status.PAUSED)]
    assert render_digest(Digest(waiting=kids)).splitlines()[2:8] == [
        "- Waiting for 5 children (the step runs once each has settled):",
        "  - cat: active, merge handed back: its loop resolves the conflict, then merge it "
        "again",
        "  - div: awaiting approval: review `$FRACTAL_BIN node diff div`, then "
        "`$FRACTAL_BIN node approve div`",
        "  - log: paused: `$FRACTAL_BIN node resume log` when it should go on",
        "  - ops: active",
        "  - wrap: idle, never started: nothing starts it but you, "
        "`$FRACTAL_BIN node start wrap`"]
    assert render_digest(Digest(waiting=[])).splitlines()[2].startswith(
        "- Waiting for children: none is live")
    assert "Waiting" not in render_digest(Digest())
