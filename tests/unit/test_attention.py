"""The attention detectors (fractal/domain/attention/rules.py): one table row per situation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fractal.domain.attention.rules import (
    RULES,
    STALL_FLOOR_S,
    Gate,
    HandBack,
    Kind,
    NodeFacts,
    Note,
    OutageHold,
    UsageHold,
    classify,
    item_id,
    stall_after,
)
from fractal.domain.attention.tree import wait_until, with_running_below
from fractal.domain.run.subtree import Unsettled

NOW = 1_000_000.0
BUDGET_REASON = "subtree cost budget reached (spent $1.0500 >= $1.00 max)"
B = "main.a"
HANDED = "conflict in a.py; handed back to main.a"


def _exited(reason: str, code: int = 1) -> NodeFacts:
    return NodeFacts(B, "exited", run_id=3, run_status="exited", run_exit=code,
                     run_reason=reason, run_ended=NOW - 60, run_spent=1.05, run_cap=1.0)


CASES = [
    ("idle", NodeFacts(B, "idle"), []),
    ("completed", NodeFacts(B, "completed", run_id=1, run_status="completed",
                            run_ended=NOW - 5), []),
    ("exited", _exited("Exited at iteration 3.2"),
     [(Kind.EXITED, f"fractal node start {B} --continue")]),
    ("budget", _exited(BUDGET_REASON, code=0),
     [(Kind.BUDGET, f"fractal node start {B} --continue --max-cost USD")]),
    ("no-progress", _exited("no progress: FAILED test_x"),
     [(Kind.NO_PROGRESS, f"fractal node start {B} --continue")]),
    ("healed", _exited("Loop exited abnormally"),
     [(Kind.INTERRUPTED, f"fractal node start {B} --continue")]),
    ("gate", NodeFacts(B, "active", run_id=2, gates=(Gate(7, "REVIEW", NOW - 30, "1 file"),),
                       last_write=NOW - 10_000),
     [(Kind.GATE, f"fractal node approve {B} 7")]),  # a gate wait is not a stall
    ("paused", NodeFacts(B, "paused", run_id=2, paused_since=NOW - 9, pause_reason="lunch"),
     [(Kind.PAUSED, f"fractal node resume {B}")]),
    ("paused-at-gate", NodeFacts(B, "paused", run_id=2, gates=(Gate(7, "R", NOW - 30),),
                                 paused_since=NOW - 9),
     [(Kind.GATE, f"fractal node approve {B} 7"), (Kind.PAUSED, f"fractal node resume {B}")]),
    ("busy", NodeFacts(B, "active", run_id=2, last_write=NOW - 10), []),
    ("stalled", NodeFacts(B, "active", run_id=2, last_write=NOW - STALL_FLOOR_S - 1),
     [(Kind.STALL, f"fractal node attach {B}")]),
    ("children-wait", NodeFacts(B, "active", run_id=2, last_write=NOW - 9999,
                                waiting_children=True, waiting_since=NOW - 9999),
     []),  # a node waiting for its children is not stalled (their gates have items)
    ("slow-step-allowed", NodeFacts(B, "active", run_id=2, last_write=NOW - 900,
                                    step_timeout=1200), []),
    ("gone", NodeFacts(B, "active", run_id=2, last_write=NOW - 999, gone=True),
     [(Kind.INTERRUPTED, f"fractal node status {B}")]),
    ("usage-wait", NodeFacts(B, "active", run_id=2, last_write=NOW - 9999,
                             usage=UsageHold(40, NOW - 9999, NOW + 600, "five_hour")),
     [(Kind.USAGE, f"fractal node stop {B}")]),  # a usage wait is not a stall
    ("outage-wait", NodeFacts(B, "active", run_id=2, last_write=NOW - 9999, outage=OutageHold(
        41, NOW - 9999, "waiting out a provider outage (HTTP 529, attempt 4) until "
        "2026-12-07 01:23:45Z")),
     [(Kind.OUTAGE, f"fractal node pause {B} && fractal node resume {B}")]),  # nor an outage
    ("outage-wait-gone", NodeFacts(B, "active", run_id=2, last_write=NOW - 999, gone=True,
                                   outage=OutageHold(41, NOW - 999, "waiting out ...")),
     [(Kind.INTERRUPTED, f"fractal node status {B}")]),
    ("handed-back-running", NodeFacts(B, "active", run_id=2, last_write=NOW - 5,
                                      merge=HandBack(3, "main", HANDED, NOW - 50)), []),
    ("handed-back-ended", NodeFacts(B, "completed", run_id=2, run_status="completed",
                                    run_ended=NOW - 5,
                                    merge=HandBack(3, "main", HANDED, NOW - 50)),
     [(Kind.MERGE, f"fractal node merge {B}")]),
    ("handed-back-ended-unresolved", NodeFacts(
        B, "exited", run_id=2, run_status="exited", run_ended=NOW - 5,
        merge=HandBack(3, "main", HANDED, NOW - 50, unresolved="/repo/.worktrees/main.a")),
     [(Kind.MERGE, f"fractal node start {B} --continue"),
      (Kind.EXITED, f"fractal node start {B} --continue")]),
    ("conflict", NodeFacts(B, "completed", merge=HandBack(3, "main", "conflict in a.py",
                                                          NOW - 50)),
     [(Kind.MERGE, f"fractal node merge {B} --hand-back")]),
    ("orphans", NodeFacts(B, "completed", run_id=2, run_status="completed",
                          run_ended=NOW - 5,
                          running_below=(Unsettled(f"{B}.c", "active", True),)),
     [(Kind.ORPHANS, f"fractal node finish {B}")]),
    ("idle-parent", NodeFacts(B, "idle", running_below=(Unsettled(f"{B}.c", "active"),)), []),
    ("message", NodeFacts(B, "completed", to_operator=(Note("ab12cd34", "help", NOW - 9),
                                                       Note("ef56ab78", "done", NOW - 1))),
     [(Kind.MESSAGE, "fractal radio read ab12cd34 ef56ab78")]),
    # The tree brake on (`fractal pause`): `node resume` and `node start` are refused
    # until `fractal resume` lifts it.
    ("paused-braked", NodeFacts(B, "paused", run_id=2, paused_since=NOW - 9, braked=True),
     [(Kind.PAUSED, "fractal resume")]),
    ("exited-braked", replace(_exited("Exited at iteration 3.2"), braked=True),
     [(Kind.EXITED, f"fractal resume && fractal node start {B} --continue")]),
    ("unstarted-braked", NodeFacts(B, "active", run_id=2, last_write=NOW - 5, braked=True,
                                   waiting_children=True, unstarted=(f"{B}.x",)),
     [(Kind.UNSTARTED, f"fractal resume && fractal node start {B}.x")]),
    # A top-level node's completed run waits for the operator's merge into the root.
    ("ready", NodeFacts(B, "completed", run_id=4, run_status="completed", run_ended=NOW - 5,
                        top_level=True, parent="main"),
     [(Kind.READY, f"fractal node merge {B}")]),
    ("ready-merged", NodeFacts(B, "completed", run_id=4, run_status="completed",
                               run_ended=NOW - 5, top_level=True, parent="main",
                               merged_at=NOW - 1), []),
    ("ready-stopped", NodeFacts(B, "stopped", run_id=4, run_status="stopped",
                                run_ended=NOW - 5, top_level=True, parent="main"), []),
    # An agent that failed every iteration fails again on `--continue`: look first.
    ("failing-agent", _exited("3 consecutive iterations failed (last: failed on PLAN)"),
     [(Kind.EXITED, f"fractal node activity {B}")]),
]


@pytest.mark.parametrize(("facts", "expected"), [(f, e) for _, f, e in CASES],
                         ids=[c[0] for c in CASES])
def test_classify(facts: NodeFacts, expected: list[tuple[Kind, str]]) -> None:
    assert [(i.kind, i.command) for i, _ in classify([facts], NOW)] == expected


def test_items_carry_spend_and_diffstat() -> None:
    (item, _), = classify([_exited(BUDGET_REASON, code=0)], NOW)
    assert "spent $1.0500 of $1.0000" in item.summary
    gate = NodeFacts(B, "active", gates=(Gate(7, "REVIEW", NOW, "2 files changed"),))
    (item, _), = classify([gate], NOW)
    assert item.summary.endswith("awaits approval; 2 files changed")
    unknown = replace(_exited("x"), run_spent=None)
    assert "spent unknown" in classify([unknown], NOW)[0][0].summary


def test_oldest_first_across_nodes() -> None:
    old = replace(_exited("x"), branch="main.z", run_ended=NOW - 500)
    new = replace(_exited("x"), branch="main.b", run_ended=NOW - 5)
    assert [i.node for i, _ in classify([new, old], NOW)] == ["main.z", "main.b"]


def test_an_ack_hides_until_the_state_changes() -> None:
    facts = _exited("x")
    (item, _), = classify([facts], NOW)
    acks = {item.key: item.fingerprint}
    assert classify([facts], NOW, acks) == []
    assert classify([facts], NOW, acks, include_acked=True)[0][1] is True
    later = replace(facts, run_id=4, run_ended=NOW)  # a new run ended: a new item
    assert [i.kind for i, _ in classify([later], NOW, acks)] == [Kind.EXITED]
    stall = NodeFacts(B, "active", run_id=2, last_write=NOW - 400)
    (s, _), = classify([stall], NOW)
    moved = replace(stall, last_write=NOW - 350)  # it wrote, then went quiet again
    assert classify([moved], NOW, {s.key: s.fingerprint})


@pytest.mark.parametrize(("timeout", "after"), [(None, 300), (60, 300), (1200, 1200)])
def test_stall_after(timeout: int | None, after: int) -> None:
    assert stall_after(timeout) == after


def test_every_kind_has_a_rule_and_ids_are_short() -> None:
    assert {r.kind for r in RULES} == set(Kind)
    assert len(item_id("gate:main.a:7")) == 8


def test_the_new_kinds_say_what_and_until_when() -> None:
    wait = NodeFacts(B, "active", run_id=2, usage=UsageHold(40, NOW - 60, 1_767_240_300.0,
                                                            "five_hour"))
    (item, _), = classify([wait], NOW)
    assert "until 2026-01-01T04:05:00Z" in item.summary
    assert item.details["until"] == "2026-01-01T04:05:00Z"
    follower = replace(wait, usage=UsageHold(41, NOW - 60, None, "five_hour"))
    (item, _), = classify([follower], NOW)
    assert "another node's probe" in item.summary and "unknown" not in item.summary
    parent = NodeFacts(B, "exited", run_id=4, run_status="exited", run_ended=NOW - 5,
                       running_below=(Unsettled(f"{B}.c", "active", True),
                                      Unsettled(f"{B}.d", "paused")))
    items = {i.kind: i for i, _ in classify([parent], NOW)}
    assert items[Kind.ORPHANS].summary == (f"run 4 ended with 2 children still running: "
                                           f"{B}.c awaiting approval, {B}.d paused")
    note = NodeFacts(B, "active", run_id=2, last_write=NOW,
                     to_operator=(Note("ab12cd34", "help", NOW - 9),))
    (msg, _), = classify([note], NOW)
    newer = replace(note, to_operator=(*note.to_operator, Note("ef56ab78", "more", NOW)))
    assert classify([note], NOW, {msg.key: msg.fingerprint}) == []
    assert [i.kind for i, _ in classify([newer], NOW, {msg.key: msg.fingerprint})] == [
        Kind.MESSAGE]  # a new message: the item is back


def test_a_paused_item_says_paused_once() -> None:
    parked = NodeFacts(B, "paused", run_id=2, paused_since=NOW - 9,
                       pause_reason="parked during PLAN")
    (item, _), = classify([parked], NOW)
    assert item.summary == "paused: during PLAN"


def test_running_below_marks_every_ancestor() -> None:
    facts = [NodeFacts("main.a", "completed"), NodeFacts("main.a.b", "exited"),
             NodeFacts("main.a.b.c", "active", gates=(Gate(1, "R", NOW),)),
             NodeFacts("main.ab", "completed")]
    out = {f.branch: f.running_below for f in with_running_below(facts)}
    assert out["main.a"] == out["main.a.b"] == (Unsettled("main.a.b.c", "active", True),)
    assert out["main.ab"] == () and out["main.a.b.c"] == ()


def test_a_child_started_after_its_parents_run_ended_is_not_that_runs_orphan() -> None:
    """Only descendants whose current run began by the time the ancestor's run ended
    were left running by it; one started later (by the operator, say) is not."""
    lead = NodeFacts(B, "completed", run_id=1, run_status="completed", run_ended=NOW - 60)
    kids = [NodeFacts(f"{B}.a", "active", run_id=5, run_started=NOW - 10),
            NodeFacts(f"{B}.b", "paused", run_id=6, run_started=NOW - 5),
            NodeFacts(f"{B}.c", "active", run_id=2, run_started=NOW - 90),
            NodeFacts(f"{B}.c.d", "active", run_id=7, run_started=NOW - 60)]
    out = {f.branch: f for f in with_running_below([lead, *kids])}
    assert [u.branch for u in out[B].running_below] == [f"{B}.c", f"{B}.c.d"]
    assert [u.branch for u in out[f"{B}.c"].running_below] == [f"{B}.c.d"]  # c still runs
    items = [item for item, _acked in classify([out[B]], NOW) if item.kind is Kind.ORPHANS]
    assert [i.details["children"] for i in items] == [[f"{B}.c", f"{B}.c.d"]]
    later = [replace(k, run_started=NOW - 30) for k in kids]
    assert not [i for i, _ in classify(with_running_below([lead, *later]), NOW)
                if i.kind is Kind.ORPHANS]


@pytest.mark.parametrize(("shown", "wakes", "until"), [
    ("waiting for usage window until 04:05Z", [1_767_240_300.0, 1_767_250_000.0],
     1_767_240_300.0),
    ("waiting for usage window until 09:99Z", [1.0, 2.0], 2.0),
    ("waiting for usage window until 04:05Z", [], None),
    ("waiting for usage window until 04:05:00Z", [1_767_240_300.0, 1_767_240_305.0],
     1_767_240_300.0),  # to the second: two wakes in one minute are told apart
    ("waiting for usage window until 04:05:05Z", [1_767_240_300.0, 1_767_240_305.0],
     1_767_240_305.0),
])
def test_wait_until(shown: str, wakes: list[float], until: float | None) -> None:
    assert wait_until(shown, wakes) == until


def test_a_child_re_armed_by_a_hand_back_is_an_orphan_of_its_parents_ended_run() -> None:
    """Like any child still running at its parent's end: the parent's run gets the
    ``orphans`` item naming it (and the child's own handed-back merge waits for it)."""
    lead = NodeFacts(B, "completed", run_id=2, run_status="completed", run_ended=NOW - 5)
    child = NodeFacts(f"{B}.c", "active", run_id=4,
                      merge=HandBack(3, B, f"conflict in a.py; handed back to {B}.c",
                                     NOW - 50))
    items = [item for item, _acked in classify(with_running_below([lead, child]), NOW)]
    assert [(i.kind, i.node, i.details.get("children")) for i in items] == [
        (Kind.ORPHANS, B, [f"{B}.c"])]


def test_a_healed_park_says_its_reason_once() -> None:
    """A crash heal's park record (written by the operator's command, not the loop) is
    both the node's newest park and its newest pause event: its reason is said once."""
    healed = NodeFacts(B, "paused", run_id=2, paused_since=NOW - 9,
                       pause_reason="parked interrupted: supervisor lost",
                       pause_asked="parked interrupted: supervisor lost")
    [(item, _)] = classify([healed], NOW)
    assert item.summary == "paused: interrupted: supervisor lost"


def test_a_paused_item_leads_with_the_reason_the_pause_was_given() -> None:
    parked = NodeFacts(B, "paused", run_id=2, paused_since=NOW - 9,
                       pause_reason="parked during PLAN", pause_asked="lunch")
    [(item, _)] = classify([parked], NOW)
    assert item.summary == "paused: lunch (during PLAN)"


def test_a_parent_waiting_on_unstarted_children_names_them_and_the_start_command() -> None:
    waiting = NodeFacts(B, "active", run_id=2, last_write=NOW - 5, waiting_children=True,
                        unstarted=(f"{B}.x", f"{B}.y"))
    items = [i for i, _ in classify([waiting], NOW) if i.kind is Kind.UNSTARTED]
    assert [i.summary for i in items] == [
        "waits for 2 children nobody has started (x, y); it waits until each is started "
        "and settles"]
    assert items[0].command == f"fractal node start {B}.x && fractal node start {B}.y"
    idle = NodeFacts(B, "active", run_id=2, last_write=NOW - 5, unstarted=(f"{B}.x",))
    assert not [i for i, _ in classify([idle], NOW) if i.kind is Kind.UNSTARTED]


@pytest.mark.parametrize(("merged_at", "shown"), [
    (None, True), (NOW - 60, True),  # never merged, or merged before the run ended
    (NOW - 5, False),                # merged after it: its parent took the work
])
def test_an_exited_run_whose_work_was_merged_afterwards_waits_for_nobody(
        merged_at: float | None, shown: bool) -> None:
    ended = NodeFacts(B, "exited", run_id=3, run_status="exited", run_exit=1,
                      run_reason="Exited at iteration 3.1", run_ended=NOW - 30,
                      merged_at=merged_at)
    kinds = [i.kind for i, _ in classify([ended], NOW)]
    assert (Kind.EXITED in kinds) is shown


def test_a_refused_merge_that_names_a_hand_back_reads_as_refused() -> None:
    """The lead's merge refused because the child still holds a conflict handed back to
    it: the merge did not land, it was never handed back (again)."""
    why = (f"refused: {B} still holds the conflict handed back to it (its last run ended "
           "exited without resolving it); run it again to resolve it")
    facts = NodeFacts(B, "exited", run_id=2, run_status="exited", run_ended=NOW - 5,
                      merge=HandBack(3, "main", why, NOW - 50))
    merges = [i for i, _ in classify([facts], NOW) if i.kind is Kind.MERGE]
    assert [(i.summary, i.command) for i in merges] == [
        (f"merge into main did not land: {why}", f"fractal node merge {B}")]
    assert merges[0].details["handed_back"] is False


def test_a_merge_refused_for_a_gate_never_approved_offers_the_forced_merge() -> None:
    """A plain merge would be refused again (the child's gate was never approved): the
    command the item offers is the one that lands, ``--force``, after the review."""
    why = (f"refused: {B}'s last run ended (killed) with EXECUTE never approved; review it "
           f"(`fractal node diff {B}`), then merge with --force to take it anyway")
    facts = NodeFacts(B, "killed", run_id=2, run_status="killed", run_ended=NOW - 5,
                      merge=HandBack(3, "main", why, NOW - 50))
    merges = [i for i, _ in classify([facts], NOW) if i.kind is Kind.MERGE]
    assert [i.command for i in merges] == [f"fractal node merge {B} --force"]


def test_a_failing_agents_item_says_what_would_help() -> None:
    """``start --continue`` alone meets the same failure again: the item points at the
    failed step's reason and the setting to fix before continuing."""
    [(item, _)] = classify([_exited("3 consecutive iterations failed (last: failed on "
                                    "PLAN)")], NOW)
    assert item.summary.endswith(
        "; every iteration failed, so `fractal node start --continue` alone fails the same "
        f"way: look at the failed step's reason (`fractal node activity {B}`), fix its "
        f"cause (the agent setting: `fractal node config set --node {B} agent=...` at the "
        f"main checkout, or its config.json), then `fractal node start {B} --continue`")


def test_a_braked_trees_paused_item_says_the_brake_is_on() -> None:
    parked = NodeFacts(B, "paused", run_id=2, paused_since=NOW - 9,
                       pause_reason="parked during PLAN", braked=True)
    [(item, _)] = classify([parked], NOW)
    assert item.summary == ("paused: during PLAN; the tree is braked (`fractal pause`): "
                            "`fractal resume` lifts the brake and resumes every parked node")
    plain = replace(parked, braked=False)
    [(was, _)] = classify([plain], NOW)
    assert classify([parked], NOW, {was.key: was.fingerprint})  # acked unbraked: back


def test_a_ready_item_names_the_target_and_the_review() -> None:
    facts = NodeFacts(B, "completed", run_id=4, run_status="completed", run_ended=NOW - 5,
                      run_reason="Reached max iterations (2)", top_level=True, parent="main")
    (item, _), = classify([facts], NOW)
    assert item.summary == (f"run 4 completed: ready to merge into main (review it: "
                            f"`fractal node diff {B}`)")
    assert item.key == f"ready:{B}:4" and item.details["target"] == "main"


def test_a_lead_whose_subtree_work_never_reached_it_is_not_announced_ready() -> None:
    """The run's end booked a child's work never merged: the item says so, and offers the
    merge the operator can run now (``--force``, without that work)."""
    label = f"{B}.c (killed, its work never merged into {B})"
    facts = NodeFacts(B, "completed", run_id=4, run_status="completed", run_ended=NOW - 5,
                      top_level=True, parent="main", unmerged_below=label)
    (item, _), = classify([facts], NOW)
    assert "ready to merge" not in item.summary
    assert item.summary.startswith(f"run 4 completed, but work of its subtree never reached "
                                   f"it ({label}): `fractal node merge {B}` is refused")
    assert item.command == f"fractal node merge {B} --force"
    assert item.details["unmerged"] == label
    (plain, _), = classify([replace(facts, unmerged_below="")], NOW)
    assert plain.fingerprint != item.fingerprint and plain.command == f"fractal node merge {B}"


@pytest.mark.parametrize(("status", "merged_at", "run_started", "shown"), [
    ("completed", "2026-01-01T00:10:00.000Z", "2026-01-01T00:00:00.000Z", True),
    ("completed", "2026-01-01T00:10:00.000Z", "2026-01-01T00:20:00.000Z", False),  # ran again
    ("idle", "2026-01-01T00:10:00.000Z", None, True),
    ("active", "2026-01-01T00:10:00.000Z", "2026-01-01T00:00:00.000Z", False),
    ("paused", "2026-01-01T00:10:00.000Z", "2026-01-01T00:00:00.000Z", False),
    ("completed", None, "2026-01-01T00:00:00.000Z", False),
])
def test_shows_merged(status: str, merged_at: str | None, run_started: str | None,
                      shown: bool) -> None:
    from fractal.domain.attention.facts import shows_merged

    assert shows_merged(status, merged_at, run_started) is shown


@pytest.mark.parametrize(("sha", "text"), [
    ("3f2a9c1deadbeef", "merged into main (3f2a9c1)"), ("", "merged into main")])
def test_merged_detail(sha: str, text: str) -> None:
    from fractal.domain.attention.facts import merged_detail

    assert merged_detail("main", sha) == text
