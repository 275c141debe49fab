"""The authority rule: every verb of the table against every relation the acting node can
have to its target (itself, its parent, a sibling, a child, a grandchild; the operator)."""

from __future__ import annotations

import pytest

from fractal.domain.authority import (
    RULES,
    Relation,
    acting_node,
    loop_by_ancestry,
    posing,
    refusal,
    relation_of,
    spoken,
)

ROOT = "main"
ACTING = "main.a"
TARGETS = {  # the relation's name -> the target, seen from main.a
    "self": "main.a",
    "parent": "main",
    "sibling": "main.b",
    "child": "main.a.x",
    "grandchild": "main.a.x.y",
    "prefix-namesake": "main.ab",  # shares the text prefix, not the lineage
    "nephew": "main.b.x",
}

# relation needed -> the relations it admits (for a node acting; the operator admits all)
ADMITS: dict[Relation, set[str]] = {
    Relation.CHILD: {"child"},
    Relation.DESCENDANT: {"child", "grandchild"},
    Relation.SUBTREE: {"self", "child", "grandchild"},
    Relation.SELF: {"self"},
    Relation.OPERATOR: set(),
}

# the table itself, stated independently: a change to RULES must change this too
EXPECTED: dict[str, Relation] = {
    "approve": Relation.CHILD, "merge": Relation.CHILD,
    "retire": Relation.DESCENDANT, "unretire": Relation.DESCENDANT,
    "delete": Relation.DESCENDANT, "pool": Relation.DESCENDANT,
    "pool status": Relation.DESCENDANT, "pool reject": Relation.DESCENDANT,
    "stop": Relation.SUBTREE, "finish": Relation.SUBTREE, "finish_cancel": Relation.SUBTREE,
    "pause": Relation.SUBTREE, "resume": Relation.SUBTREE, "kill": Relation.SUBTREE,
    "start": Relation.SUBTREE, "attach": Relation.SUBTREE, "update": Relation.SUBTREE,
    "spawn": Relation.SUBTREE, "diff": Relation.SUBTREE, "conflicts": Relation.SUBTREE,
    "commit": Relation.SELF, "config": Relation.SELF, "pool result": Relation.SELF,
    "done": Relation.SELF,
    "reset": Relation.OPERATOR, "destroy": Relation.OPERATOR, "brake": Relation.OPERATOR,
    "release": Relation.OPERATOR, "notify": Relation.OPERATOR, "ack": Relation.OPERATOR,
    "usage reopen": Relation.OPERATOR,
}


def test_the_table_is_the_one_stated() -> None:
    assert dict(RULES) == EXPECTED


@pytest.mark.parametrize("verb", sorted(EXPECTED))
@pytest.mark.parametrize("relation", sorted(TARGETS))
def test_a_node_acts_only_where_its_relation_admits(verb: str, relation: str) -> None:
    why = refusal(verb, acting=ACTING, target=TARGETS[relation], root=ROOT)
    allowed = relation in ADMITS[EXPECTED[verb]]
    assert (why is None) is allowed, why
    if why is not None:
        assert ACTING in why and spoken(verb) in why  # names who and what
        assert "operator" in why  # and who may


@pytest.mark.parametrize("verb", sorted(EXPECTED))
@pytest.mark.parametrize("target", sorted({*TARGETS.values(), ROOT}))
def test_the_operator_may_act_on_any_node(verb: str, target: str) -> None:
    assert refusal(verb, acting=ROOT, target=target, root=ROOT) is None


@pytest.mark.parametrize(("acting", "target", "relation"), [
    ("main.a", "main.a", Relation.SELF),
    ("main.a", "main.a.x", Relation.CHILD),
    ("main.a", "main.a.x.y", Relation.DESCENDANT),
    ("main.a", "main", None),
    ("main.a", "main.b", None),
    ("main.a", "main.ab", None),
    ("main.a.x", "main.a", None),
])
def test_relation_of(acting: str, target: str, relation: Relation | None) -> None:
    assert relation_of(acting, target) is relation


def test_each_refusal_says_what_to_do() -> None:
    said = {verb: refusal(verb, acting=ACTING, target="main.b", root=ROOT) for verb in EXPECTED}
    assert "only its own direct children" in (said["approve"] or "")
    assert "only the operator (at the root) or an ancestor of main.b" in (said["delete"] or "")
    assert "only itself and its own descendants" in (said["stop"] or "")
    assert "only for itself" in (said["commit"] or "")
    assert "only the operator at the root may reset" in (said["reset"] or "")
    assert "outside any node's loop" in (said["ack"] or "")


def test_a_verb_without_a_rule_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        refusal("frobnicate", acting=ACTING, target="main.b", root=ROOT)


# --- who acts, by process ancestry -------------------------------------------------------

SUPERVISORS = {100: ("main.a", 50.0), 200: ("main.a.b", 60.0)}


@pytest.mark.parametrize(("chain", "expected"), [
    pytest.param([], None, id="no-chain"),
    pytest.param([(7, None), (1, None)], None, id="below-no-supervisor"),
    pytest.param([(7, None), (100, 50.0), (1, None)], "main.a", id="below-a"),
    pytest.param([(100, 50.0)], "main.a", id="its-parent-is-the-supervisor"),
    pytest.param([(7, None), (200, 60.0), (9, None), (100, 50.0)], "main.a.b",
                 id="nearest-wins"),
    pytest.param([(7, None), (100, 51.0)], None, id="recycled-pid"),
    pytest.param([(7, None), (100, 50.005)], "main.a", id="within-tolerance"),
    pytest.param([(7, None), (100, None)], None, id="unreadable-create-time"),
])
def test_loop_by_ancestry(chain: list[tuple[int, float | None]], expected: str | None) -> None:
    assert loop_by_ancestry(chain, SUPERVISORS) == expected


# (process, _NODE's node, --path's node) -> acting node, or "refused"
POSING_CASES = [
    (None, None, "main", "main"),  # the operator's shell
    (None, None, "main.a", "main.a"),  # a shell in a node's worktree
    (None, "main.a", "main", "main.a"),  # below no supervisor, _NODE set: as before
    ("main.a", "main.a", "main", "main.a"),  # the loop's own agent at the main checkout
    ("main.a", "main.a", "main.b", "main.a"),  # --path elsewhere: still its own node
    ("main.a", None, "main.a", "main.a"),  # _NODE dropped, in its own worktree
    ("main.a", "main", "main", "refused"),  # _NODE rewritten to the root's directory
    ("main.a", "main.b", "main.a", "refused"),  # _NODE rewritten to a sibling
    ("main.a", "main.a.x", "main.a", "refused"),  # even to its own child
    ("main.a", None, "main", "refused"),  # _NODE dropped, --path at the main checkout
    ("main.a", None, "main.b", "refused"),  # _NODE dropped, --path at a sibling
    ("main.a", None, "main.a.x", "refused"),  # _NODE dropped, --path at its child
]


@pytest.mark.parametrize(("process", "loop", "caller", "expected"), POSING_CASES)
def test_a_process_acts_as_the_node_it_runs_under(
        process: str | None, loop: str | None, caller: str, expected: str) -> None:
    why = posing(process, loop, caller, root=ROOT)
    if expected == "refused":
        assert why is not None
        assert f"runs under {process}'s supervisor" in why
        assert "ask" in why  # says what to do instead
    else:
        assert why is None
        assert acting_node(process, loop, caller) == expected
