"""The pure rules of ``node merge``: who may merge, when it is refused, what travels, and
the squash commit's subject and body."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fractal.domain.merge.rules import (
    MergeFacts,
    authorisation_refusal,
    merge_body,
    merge_refusal,
    merge_subject,
    travels_by_place,
    unmerged_label,
    view_refusal,
)


@pytest.mark.parametrize(("path", "expected"), [
    ("calc/ops.py", True), (".fractal/main.a/NODE.md", False), (".fractal", False),
    (".fractal/", False), (".fractalx/a", True), ("a/.fractal/x", True),
])
def test_what_travels(path: str, expected: bool) -> None:
    assert travels_by_place(path) is expected


@pytest.mark.parametrize(("caller", "child", "target", "allowed"), [
    ("main", "main.a", "main", True),
    ("main", "main.a.b", "elsewhere", True),
    ("main.a", "main.a.b", "main.a", True),
    ("main.a", "main.a.b", "main", False),
    ("main.a", "main.a.b.c", "main.a.b", False),
    ("main.b", "main.a", "main", False),
    ("main.a", "main.a", "main", False),
])
def test_who_may_merge(caller: str, child: str, target: str, allowed: bool) -> None:
    parent = child.rpartition(".")[0]
    why = authorisation_refusal(caller=caller, root="main", child=child, child_parent=parent,
                                target=target)
    assert (why is None) is allowed


@pytest.mark.parametrize(("caller", "node", "allowed"), [
    ("main", "main.a.b", True), ("main.a", "main.a.b.c", True), ("main.a", "main.a", True),
    ("main.a", "main.b", False), ("main.a", "main.ab", False),
])
def test_who_may_look(caller: str, node: str, allowed: bool) -> None:
    assert (view_refusal(caller=caller, root="main", node=node) is None) is allowed


BASE = MergeFacts(child="main.a", target="main", child_status="completed", target_status=None,
                  last_run_status="completed", unapproved_gate=None)


@pytest.mark.parametrize(("change", "fragment"), [
    ({}, None),
    ({"child_status": "active"}, "main.a is active"),
    ({"child_status": "paused"}, "main.a is paused"),
    ({"child_status": "idle"}, None),
    ({"target_status": "active"}, "only its own loop"),
    ({"target_status": "paused", "caller_is_target_loop": True}, None),
    ({"target_status": "active", "caller_is_target_loop": True}, None),
    ({"child_status": "active", "caller_is_target_loop": True}, "main.a is active"),
    ({"target_operation": "rebase"}, "git rebase --abort"),
    ({"target_dirty": ("README.md",)}, "README.md"),
    ({"last_run_status": "exited"}, "--force"),
    ({"last_run_status": "exited", "force": True}, None),
    ({"last_run_status": "exited", "budget_landing": True}, None),  # a wind-down, no breakdown
    ({"last_run_status": "exited", "budget_landing": True, "unapproved_gate": "REVIEW"},
     "REVIEW never approved"),
    ({"unapproved_gate": "EXECUTE"}, "EXECUTE never approved"),
    ({"last_run_status": "exited", "unapproved_gate": "EXECUTE"},
     "last run ended (exited) with EXECUTE never approved"),  # a heal or a wall at the gate
    ({"last_run_status": "killed", "unapproved_gate": "PLAN"}, "ended (killed) with PLAN"),
    ({"unapproved_gate": "EXECUTE", "force": True}, None),
    ({"unmerged_below": ("main.a.x (completed, its work never merged into main.a)",)},
     "main.a's subtree holds work that never reached main.a: main.a.x (completed"),
    ({"unmerged_below": ("main.a.x (a conflict handed back to it, not merged since)",),
      "force": True}, None),
    ({"unmerged_below": ("main.a.x (stopped, ...)",), "unapproved_gate": "PLAN"},
     "PLAN never approved"),
    ({"target_dirty": ("x",), "force": True}, "uncommitted"),
    ({"child_status": "active", "force": True}, "active"),
])
def test_refusal_rules(change: dict[str, object], fragment: str | None) -> None:
    why = merge_refusal(replace(BASE, **change))  # type: ignore[arg-type]
    if fragment is None:
        assert why is None
    else:
        assert why is not None and fragment in why


@pytest.mark.parametrize(("title", "expected"), [
    ("add the ops", "main.lead: merge main.lead.div (add the ops)"),
    (None, "main.lead: merge main.lead.div (div)"),
    ("  ", "main.lead: merge main.lead.div (div)"),
    ("two\nlines", "main.lead: merge main.lead.div (two)"),
])
def test_subject(title: str | None, expected: str) -> None:
    assert merge_subject("main.lead", "main.lead.div", title) == expected


def test_body_caps_subjects_and_the_diffstat() -> None:
    stat = [f" f{i}.py | 1 +" for i in range(25)] + [" 25 files changed, 25 insertions(+)"]
    body = merge_body([f"s{i}" for i in range(60)], stat)
    subjects, diffstat = body.split("\n\n")
    assert subjects.splitlines()[:2] == ["- s0", "- s1"]
    assert subjects.splitlines()[-1] == "- ... and 10 more commits"
    assert len(subjects.splitlines()) == 51
    assert diffstat.splitlines()[-2:] == [" ... 5 more files",
                                          " 25 files changed, 25 insertions(+)"]
    assert merge_body([], []) == ""


def test_an_exited_child_holding_a_handed_back_conflict_is_sent_back_to_resolve_it() -> None:
    """The refusal names the way out (run the child again), not --force, which would only
    meet the conflict again."""
    from fractal.domain.merge.rules import MergeFacts, merge_refusal

    facts = MergeFacts(child="main.l.b", target="main.l", child_status="exited",
                       target_status="active", last_run_status="exited", unapproved_gate=None,
                       target_dirty=(), target_operation=None, caller_is_target_loop=True,
                       force=False, handed_back=True)
    why = merge_refusal(facts)
    assert why is not None and "fractal node start --continue main.l.b" in why


@pytest.mark.parametrize(("handed_back", "resolved", "refused_with"), [
    (True, False, "--force"),          # the conflict is still there
    (False, True, None),               # concluded since: the exited run does not count
    (False, False, "broke down"),      # no hand-back: an exited run is a breakdown
])
def test_an_exited_run_after_a_hand_back_refuses_only_while_the_conflict_is_there(
        handed_back: bool, resolved: bool, refused_with: str | None) -> None:
    from fractal.domain.merge.rules import MergeFacts, merge_refusal

    facts = MergeFacts(child="main.h2", target="main", child_status="exited",
                       target_status=None, last_run_status="exited", unapproved_gate=None,
                       handed_back=handed_back, hand_back_resolved=resolved)
    why = merge_refusal(facts)
    assert (why is None) if refused_with is None else (why is not None and refused_with in why)


@pytest.mark.parametrize(("status", "handed_back", "label"), [
    ("active", False, "main.a.b (active, still running)"),
    ("paused", True, "main.a.b (paused, still running)"),  # running first: not in yet
    ("completed", True, "main.a.b (a conflict handed back to it, not merged since)"),
    ("killed", False, "main.a.b (killed, its work never merged into main.a)"),
])
def test_unmerged_label(status: str, handed_back: bool, label: str) -> None:
    assert unmerged_label("main.a.b", status, handed_back=handed_back, target="main.a") == label
