"""Who an attention item is for (fractal/domain/attention_route.py): one row per case."""

from __future__ import annotations

import pytest

from fractal.domain.attention.rules import Gate, HandBack, Kind, NodeFacts, classify
from fractal.domain.attention.tree import with_running_below
from fractal.domain.attention_route import HOLD_GRACE_S, for_operator, held_by, held_subject
from fractal.lifecycle.inbox import held_line

NOW = 1_000_000.0
C = "main.lead.c"
FRESH, OLD = NOW - 60, NOW - HOLD_GRACE_S - 1


def _gate(since: float, **kw: object) -> NodeFacts:
    return NodeFacts(C, "active", run_id=2, gates=(Gate(7, "REVIEW", since),),
                     last_write=NOW - 1, **kw)  # type: ignore[arg-type]


CASES = [
    ("gate, lead running, fresh", _gate(FRESH, parent_running=True), "main.lead"),
    ("gate, lead running, past the grace", _gate(OLD, parent_running=True), None),
    ("gate, lead not running", _gate(FRESH), None),
    ("run end, lead running", NodeFacts(C, "exited", run_id=3, run_status="exited",
                                        run_exit=1, run_reason="Exited", run_ended=FRESH,
                                        parent_running=True), "main.lead"),
    ("merge, lead running", NodeFacts(C, "completed", parent_running=True,
                                      merge=HandBack(3, "main.lead", "conflict in a.py",
                                                     FRESH)), "main.lead"),
    ("stall is the operator's", NodeFacts(C, "active", run_id=2, last_write=OLD,
                                          parent_running=True), None),
    ("the operator's own pause", NodeFacts(C, "paused", run_id=2, paused_since=FRESH,
                                           paused_by_operator=FRESH), "operator"),
    ("the operator's pause, long ago", NodeFacts(C, "paused", run_id=2, paused_since=OLD,
                                                 paused_by_operator=OLD), None),
    ("a pause the loop took", NodeFacts(C, "paused", run_id=2, paused_since=FRESH), None),
    ("unstarted, the waiting node runs", NodeFacts(
        C, "active", run_id=2, last_write=NOW - 1, waiting_children=True,
        unstarted=(f"{C}.x",), waiting_since=FRESH), C),
    ("unstarted, waiting past the grace", NodeFacts(
        C, "active", run_id=2, last_write=NOW - 1, waiting_children=True,
        unstarted=(f"{C}.x",), waiting_since=OLD), None),
]


@pytest.mark.parametrize(("facts", "holder"), [(f, h) for _, f, h in CASES],
                         ids=[c[0] for c in CASES])
def test_held_by(facts: NodeFacts, holder: str | None) -> None:
    [(item, _)] = classify([facts], NOW)
    assert held_by(item, facts, NOW, HOLD_GRACE_S) == holder


def test_a_running_lead_holds_its_childs_items_and_a_settled_one_does_not() -> None:
    lead = NodeFacts("main.lead", "active", run_id=1, last_write=NOW - 1)
    child = _gate(FRESH)
    facts = with_running_below([lead, child])
    mine, held = for_operator(classify(facts, NOW), facts, NOW, HOLD_GRACE_S)
    assert mine == [] and [(i.kind, h) for i, h in held] == [(Kind.GATE, "main.lead")]
    gone = with_running_below([NodeFacts("main.lead", "active", gone=True), child])
    mine, held = for_operator(classify(gone, NOW), gone, NOW, HOLD_GRACE_S)
    assert [i.kind for i, _ in mine] == [Kind.INTERRUPTED, Kind.GATE] and held == []
    top = with_running_below([NodeFacts("main.top", "active", run_id=1, last_write=NOW - 1,
                                        gates=(Gate(4, "R", FRESH),))])
    mine, held = for_operator(classify(top, NOW), top, NOW, HOLD_GRACE_S)
    assert [i.kind for i, _ in mine] == [Kind.GATE] and held == []  # its parent: the root


def test_a_merge_under_a_running_lead_offers_a_command_that_works_now() -> None:
    facts = NodeFacts(C, "completed", parent_running=True,
                      merge=HandBack(3, "main.lead", "conflict in a.py; handed back to c",
                                     OLD))
    [(item, _)] = classify([facts], NOW)
    assert item.command.startswith("fractal radio send --node main.lead --subject 'merge c'")


SUBJECTS = [
    ("a gate names its node", _gate(FRESH, parent_running=True), "gate main.lead.c"),
    ("unstarted names the idle child, not the waiting node", NodeFacts(
        C, "active", run_id=2, last_write=NOW - 1, waiting_children=True,
        unstarted=(f"{C}.x",), waiting_since=FRESH), "unstarted main.lead.c.x"),
    ("unstarted names every idle child", NodeFacts(
        C, "active", run_id=2, last_write=NOW - 1, waiting_children=True,
        unstarted=(f"{C}.x", f"{C}.y"), waiting_since=FRESH),
     "unstarted main.lead.c.x, main.lead.c.y"),
]


@pytest.mark.parametrize(("facts", "subject"), [(f, s) for _, f, s in SUBJECTS],
                         ids=[c[0] for c in SUBJECTS])
def test_held_subject(facts: NodeFacts, subject: str) -> None:
    [(item, _)] = classify([facts], NOW)
    assert held_subject(item) == subject


def test_the_held_line_names_the_idle_children_under_their_waiting_node() -> None:
    facts = NodeFacts(C, "active", run_id=2, last_write=NOW - 1, waiting_children=True,
                      unstarted=(f"{C}.x", f"{C}.y"), waiting_since=FRESH)
    [(item, _)] = classify([facts], NOW)
    assert held_line([(item, C)], HOLD_GRACE_S) == (
        "1 item is with the loop that acts on it first (main.lead.c: unstarted "
        "main.lead.c.x, main.lead.c.y); each reaches you after 10m unhandled")
