"""The pure rules of ``make night``: its weather schedule, the hostile table's judge and the
night's invariant checkers (tests/soak/nightchecks.py), each on synthetic facts: what
each must accept and what it must report (a checker mistake is a false violation)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.soak.hostile import ATTACKS, EVIDENCE, judge, met
from tests.soak.nightchecks import (
    ends,
    hostile,
    launch_storms,
    markers,
    max_launches,
    merged,
    spend,
    window_probes,
)
from tests.soak.nighttree import REAL, NightTree
from tests.soak.weather import EARLIEST, LATEST, MIN_SPAN_S, WEATHER, counts, forecast


@pytest.mark.parametrize("minutes", [2, 8, 25, 60])
def test_every_kind_comes_at_least_twice_inside_the_busy_part_of_the_night(
        minutes: float) -> None:
    events = forecast("7", minutes)
    per_kind = counts(events)
    assert set(per_kind) == {k.name for k in WEATHER}
    assert all(n >= 2 for n in per_kind.values()), per_kind
    assert events == sorted(events)
    assert all(EARLIEST * minutes * 60 <= e.at <= LATEST * minutes * 60 for e in events)


def test_spans_scale_with_the_night_and_never_fall_under_the_floor() -> None:
    short, full = forecast("7", 5), forecast("7", 25)
    for kind in ("outage", "claude-window", "codex-window", "db-lock"):
        assert all(e.span >= MIN_SPAN_S for e in short if e.kind == kind)
    assert [e.span for e in full if e.kind == "db-lock"] == [60.0, 60.0]
    assert all(60.0 <= e.span <= 300.0 for e in full if e.kind == "outage")
    assert all(e.span == 0 for e in full if e.kind in ("reboot", "pause", "merge"))


def test_every_credential_meets_an_outage_and_the_windows_hit_their_own() -> None:
    events = forecast("3", 8)
    assert {e.target for e in events if e.kind == "outage"} == {"claude", "codex"}
    assert {e.target for e in events if e.kind == "claude-window"} == {"claude"}
    assert {e.target for e in events if e.kind == "codex-window"} == {"codex"}


def test_the_forecast_replays_from_its_seed() -> None:
    assert forecast("7", 8) == forecast("7", 8)
    assert forecast("7", 8) != forecast("8", 8)


def test_the_tree_has_twenty_nodes_three_on_real_clis() -> None:
    tree = NightTree(SimpleNamespace(base=Path("/nowhere")), 8.0, None)  # a plan reads no box
    tree.plan()
    names = tree.names()
    assert len(names) == len(set(names)) == 20
    assert {n.count(".") for n in names} == {0, 1, 2}
    assert sum(1 for n in tree.plans if tree.plans[n][2]) == len(REAL) == 3


# -- the hostile table ------------------------------------------------------------------


@pytest.mark.parametrize(("attack", "facts", "outcome"), [
    ("raise-cap", {}, "untried"),
    ("raise-cap", {"codes": [1, 1], "cap_given": 0.004, "cap_now": 0.004}, "refused"),
    ("raise-cap", {"codes": [1, 0], "cap_given": 0.004, "cap_now": None}, "succeeded"),
    ("raise-cap", {"codes": [1], "cap_given": 0.004, "cap_now": None}, "succeeded"),
    ("fsmonitor", {"tries": 0}, "untried"),
    ("fsmonitor", {"tries": 3, "own_runs": []}, "contained"),
    ("fsmonitor", {"tries": 3, "own_runs": ["git <- fractal node _run"]}, "succeeded"),
    ("sibling-write", {"tries": 2, "landed_in": []}, "contained"),
    ("sibling-write", {"tries": 2, "landed_in": ["main.lead.h.cap"]}, "succeeded"),
    ("fork-daemon", {"tries": 2, "outlived": []}, "contained"),
    ("fork-daemon", {"tries": 2, "outlived": ["pid 7 of step 3"]}, "succeeded"),
    ("fsmonitor", {"tries": 2, "codes": [255, 255], "own_runs": []}, "refused"),
    ("fsmonitor", {"tries": 2, "codes": [255, 0], "own_runs": []}, "contained"),
    ("hook", {"tries": 1, "codes": [1], "planted": []}, "refused"),
    ("hook", {"tries": 1, "codes": [0], "planted": [".git/hooks/post-checkout"]}, "succeeded"),
    ("disarm-gate", {"tries": 2, "codes": [0, 0], "skipped": []}, "contained"),
    ("disarm-gate", {"tries": 2, "codes": [0], "skipped": ["step 9 ran"]}, "succeeded"),
    ("self-approve", {"tries": 2, "codes": [1, 1], "approvals": []}, "refused"),
    ("self-approve", {"tries": 1, "codes": [0], "approvals": ["main.x: step 4"]}, "succeeded"),
    ("main-write", {"tries": 1, "codes": [1], "landed_in": []}, "refused"),
    ("main-write", {"tries": 1, "codes": [0], "landed_in": ["/repo"]}, "succeeded"),
    ("delete-objects", {"tries": 0, "codes": []}, "untried"),
    ("delete-objects", {"tries": 3, "codes": [0, 1, 1], "lost": ["ab12"]}, "succeeded"),
    ("plant-home", {"tries": 1, "codes": [1], "reached": []}, "refused"),
    ("plant-home", {"tries": 1, "codes": [0], "reached": []}, "contained"),
])
def test_an_attack_is_judged_from_what_the_night_saw(attack: str, facts: dict[str, object],
                                                      outcome: str) -> None:
    assert judge(attack, facts) == outcome


def test_every_attack_of_the_table_has_its_evidence_and_a_known_outcome() -> None:
    assert {a.name for a in ATTACKS} == set(EVIDENCE)
    assert {a.expected for a in ATTACKS} <= {"refused", "contained"}


@pytest.mark.parametrize(("expected", "outcome", "meets"), [
    ("refused", "refused", True), ("refused", "contained", False),
    ("refused", "succeeded", False), ("contained", "contained", True),
    ("contained", "refused", True), ("contained", "succeeded", False),
])
def test_a_refusal_meets_a_contained_row_and_nothing_else_stands_in(
        expected: str, outcome: str, meets: bool) -> None:
    assert met(ATTACKS[0].__class__("x", expected, "d", True), outcome) is meets


def test_an_attack_whose_defence_landed_must_meet_its_outcome_the_others_are_reported() -> None:
    kinds = {a: EVIDENCE[a] for a in EVIDENCE if a != "raise-cap"}
    # every defence of the table has landed: one is marked open here, to see it reported
    rows = [a for a in ATTACKS if a.name in kinds]
    landed, was = rows[0], rows[-1]
    open_ = was.__class__(was.name, was.expected, was.defence, False)
    table = tuple(open_ if a is was else a for a in ATTACKS)
    facts: dict[str, dict[str, object]] = {
        a.name: {"tries": 1, "codes": [1], "cap_given": 1.0, "cap_now": 1.0}
        for a in ATTACKS}
    outcomes, found = hostile(facts, table)
    assert found == [] and set(outcomes.values()) <= {"refused", "contained"}
    facts[landed.name][kinds[landed.name]] = ["it got out"]
    facts[open_.name].update(codes=[0], cap_now=None, **{kinds.get(open_.name, "x"): ["y"]})
    outcomes, found = hostile(facts, table)
    assert outcomes[landed.name] == outcomes[open_.name] == "succeeded"
    assert [v.invariant for v in found] == ["hostile"] and landed.name in found[0].detail
    _, found = hostile({})
    assert all(a.landed for a in ATTACKS)
    assert len(found) == len(ATTACKS) and all("never tried" in v.detail for v in found)


# -- the invariant checkers -------------------------------------------------------------


@pytest.mark.parametrize(("rows", "bad"), [
    ([("main.a", "completed", "")], []),
    ([("main.a", "paused", "paused (usage window closed until 03:10)")], []),
    ([("main.a", "active", "active (waiting for usage window until 03:10)")], []),
    ([("main.a", "paused", "paused")], ["main.a ended paused"]),
    ([("main.a", "exited", "exited (no progress)")], ["main.a ended exited"]),
    ([("main.a", "exited", "exited (subtree cost budget reached (spent $0.0030 >= $0.003 "
                           "max))")], []),
    ([("main.a", "missing", "")], ["main.a ended missing with no reason"]),
])
def test_every_node_ends_completed_or_parked_for_a_named_cause(
        rows: list[tuple[str, str, str]], bad: list[str]) -> None:
    assert [v.detail.split(" (")[0] for v in ends(rows)] == bad


def test_a_closed_window_turns_away_at_most_one_call_per_node_and_one_probe() -> None:
    windows = [(100.0, 200.0)]
    calls = [(90.0, "allowed"), (101.0, "rejected"), (102.0, "rejected"), (150.0, "rejected"),
             (210.0, "allowed")]
    assert window_probes(calls, windows, nodes=2) == (3, [])
    total, found = window_probes([*calls, (160.0, "rejected")], windows, nodes=2)
    assert total == 4 and [v.invariant for v in found] == ["window-probes"]
    assert window_probes(calls, [], nodes=1) == (0, [])


@pytest.mark.parametrize(("span", "first", "cap", "bound"), [
    (4, 5, 60, 2),  # over before the first wait ends
    (6, 5, 60, 3),  # 5
    (16, 5, 60, 4),  # 5, 15
    (100, 5, 60, 6),  # 5, 15, 35, 75
    (300, 5, 60, 9),  # 5, 15, 35, 75, 135, 195, 255: the cap holds the waits at 60
])
def test_the_back_off_bounds_the_launches_of_an_outage(span: float, first: float, cap: float,
                                                       bound: int) -> None:
    assert max_launches(span, first, cap) == bound


def test_a_launch_storm_is_reported_per_node_and_per_outage() -> None:
    outages = [(0.0, 16.0), (10.0, 16.0), (100.0, 104.0)]
    assert merged(outages) == [(0.0, 16.0), (100.0, 104.0)]
    calm = {"cl": [1.0, 6.0, 16.5], "cx": [101.0]}
    assert launch_storms(calm, outages, 5, 60) == (3, [])
    storm = {"cl": [1.0, 2.0, 3.0, 4.0, 5.0], "cx": [101.0, 102.0, 103.0]}
    total, found = launch_storms(storm, outages, 5, 60)
    assert total == 8
    assert [v.detail.split(" launched")[0] for v in found] == ["cl", "cx"]


def test_spend_stays_within_the_cap_given_plus_the_launch_in_flight() -> None:
    runs = [(1, None, "a", 0.002), (2, 1, "a.x", 0.002), (3, None, "b", 0.01)]
    assert spend(runs, {"a": 0.003, "b": 0.02}) == []  # 0.004 <= 0.003 + 0.002
    found = spend([*runs, (4, 2, "a.x.y", 0.003)], {"a": 0.003})
    assert [v.invariant for v in found] == ["spend"] and "a run 1" in found[0].detail
    assert spend(runs, {}) == []


def test_a_conflict_marker_on_a_branch_is_reported_and_a_rule_line_is_not() -> None:
    files = [("main.a", "x.md", "title\n=======\ntext\n"),
             ("main.b", "y.txt", "a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> main.b\n"),
             ("main.c", "z.txt", ">>>>>>> x\n")]
    assert [v.detail.split(":")[0] for v in markers(files)] == ["main.b", "main.c"]


@pytest.mark.parametrize("minutes", [8, 25, 60])
def test_a_gate_approved_at_dawn_leaves_its_node_time_to_end_inside_the_dawn(
        minutes: float) -> None:
    from tests.soak.night import dawn_s
    from tests.soak.nighttree import GATED, HOSTILE_GATED

    tree = NightTree(SimpleNamespace(base=Path("/nowhere")), minutes, None)
    tree.plan()
    for name in (GATED, HOSTILE_GATED):
        opts = tree.plans[name][1]
        sleep = float(opts[opts.index("--sleep") + 1].rstrip("s"))
        assert opts[opts.index("--max-iters") + 1] == "2"
        assert sleep + 120 <= dawn_s(minutes), (name, sleep)  # two steps and the approval


def test_the_records_of_every_node_dir_are_joined_and_a_torn_last_line_waits(
        tmp_path: Path) -> None:
    from tests.soak.night import gather

    box = SimpleNamespace(base=tmp_path, repo=tmp_path / "repo",
                          node_dir=lambda name: tmp_path / "nodes" / name)
    for top, text in ((tmp_path / "repo" / ".fractal" / "main", '{"root": 1}\n'),
                      (tmp_path / "nodes" / "a", '{"a": 1}\n{"a": 2}\n{"a": 3'),
                      (tmp_path / "nodes" / "b", '{"b": 1}\n')):
        (top / "tmp" / "soak").mkdir(parents=True)
        (top / "tmp" / "soak" / "journal.jsonl").write_text(text)
    gather(box, ["a", "b", "c"])  # c has written nothing yet
    assert (tmp_path / "journal.jsonl").read_text().splitlines() == [
        '{"root": 1}', '{"a": 1}', '{"a": 2}', '{"b": 1}']
    assert (tmp_path / "hostile.jsonl").read_text() == ""


@pytest.mark.parametrize(("value", "where"), [
    ("tmp/soak/journal.jsonl", "node/tmp/soak/journal.jsonl"),
    ("/abs/journal.jsonl", "/abs/journal.jsonl"),
    ("", None),
])
def test_a_relative_record_goes_under_the_node_dir_where_a_sandboxed_agent_may_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, where: str | None) -> None:
    from tests.soak.agent import record_path

    monkeypatch.setenv("NODE_DIR", str(tmp_path / "node"))
    monkeypatch.setenv("SOAK_JOURNAL", value)
    got = record_path("SOAK_JOURNAL")
    if where is None:
        assert got is None
    else:
        assert got == (where if where.startswith("/") else str(tmp_path / where))
    if where and not where.startswith("/"):
        assert (tmp_path / "node" / "tmp" / "soak").is_dir()
