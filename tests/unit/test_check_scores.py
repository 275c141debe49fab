"""Scores in the check track: the pass rule of a scored result, the gate's
``pass_score:``, the stagnation track the red scored exit checks advance, and the gate's
fix-cycle frontmatter (``on_fail: fix``, ``fix:``, ``max_fix_rounds:``,
``on_fail_final:``)."""

from __future__ import annotations

import pytest

from fractal.domain.checks.rules import (
    CheckKind,
    CheckResult,
    CheckTrack,
    FixPlan,
    OnFail,
    ScoreRules,
    failure_ids,
    gate_fix_plan,
    gate_on_fail,
    gate_pass_score,
)
from fractal.domain.checks.signature import CheckSummary
from fractal.domain.errors import InvalidValue


def _result(score: float | None, *, code: int = 0, needed: float | None = 0.8,
            signature: str = "", failures: int | None = None) -> CheckResult:
    return CheckResult(kind=CheckKind.EXIT, command="check", exit_code=code, seconds=1.0,
                       tail="", output_file="/l", summary=CheckSummary(signature, failures, None),
                       iteration=1, score=score, needed=needed)


@pytest.mark.parametrize(("score", "code", "needed", "passed"), [
    (0.8, 0, 0.8, True), (0.79, 0, 0.8, False), (None, 0, 0.8, False),
    (0.9, 1, 0.8, False), (0.1, 0, None, True), (None, 0, None, True),
])
def test_a_scored_result_passes_at_its_threshold(score: float | None, code: int,
                                                 needed: float | None, passed: bool) -> None:
    assert _result(score, code=code, needed=needed).passed is passed


@pytest.mark.parametrize(("fields", "default", "expected"), [
    ({}, None, None), ({}, 0.5, 0.5), ({"pass_score": "0.9"}, 0.5, 0.9),
    ({"pass_score": " "}, None, None),
])
def test_gate_pass_score(fields: dict[str, str], default: float | None,
                         expected: float | None) -> None:
    assert gate_pass_score(fields, default) == expected


@pytest.mark.parametrize("value", ["2", "zero", "A=0.8,B=0.9"])
def test_gate_pass_score_refuses(value: str) -> None:
    with pytest.raises(InvalidValue, match="pass_score"):
        gate_pass_score({"pass_score": value}, None)


def test_failure_ids_come_from_a_listing_signature() -> None:
    assert failure_ids(_result(0.5, code=1, signature="a::x, b::y", failures=2)) == {
        "a::x", "b::y"}
    assert failure_ids(_result(0.5, code=1, signature="ERROR: boom")) == frozenset()


@pytest.mark.parametrize(("scores", "limit", "stagnant_at"), [
    ((0.5, 0.7, 0.71, 0.715), 2, 4),
    ((0.5, 0.7, 0.71, 0.74, 0.75, 0.76), 2, 6),
    ((0.5, 0.51), 1, 2),
    ((0.5, 0.5, 0.5), None, None),
])
def test_red_scored_checks_advance_the_stagnation_track(
        scores: tuple[float, ...], limit: int | None, stagnant_at: int | None) -> None:
    rules = ScoreRules(pass_score=0.8, min_gain=0.02, stagnation=limit)
    track, seen = CheckTrack(), None
    for index, score in enumerate(scores, start=1):
        track = track.after_exit_check(_result(score, signature="s"), None, rules)
        if track.stagnant is not None and seen is None:
            seen = index
    assert seen == stagnant_at


def test_a_passing_check_leaves_the_track_alone() -> None:
    track = CheckTrack().after_exit_check(_result(0.9), None, ScoreRules(0.8))
    assert track.passed == "check" and track.scores is None and track.stagnant is None


@pytest.mark.parametrize(("fields", "expected"), [
    ({"fix": "fixers/LINT.md"}, FixPlan("fixers/LINT.md", 3, OnFail.STOP_ITERATION)),
    ({"fix": "fixers/LINT.md", "max_fix_rounds": "1", "on_fail_final": "continue"},
     FixPlan("fixers/LINT.md", 1, OnFail.CONTINUE)),
    ({"fix": "LINT-FIX.md", "max_fix_rounds": "10"}, FixPlan("LINT-FIX.md", 10)),
])
def test_gate_fix_plan(fields: dict[str, str], expected: FixPlan) -> None:
    assert gate_fix_plan(fields) == expected


@pytest.mark.parametrize(("fields", "key"), [
    ({}, "fix:"), ({"fix": "steps/09-FIX.md"}, "fix:"), ({"fix": "/etc/x.md"}, "fix:"),
    ({"fix": "../x.md"}, "fix:"), ({"fix": "f.md", "max_fix_rounds": "0"}, "max_fix_rounds"),
    ({"fix": "f.md", "max_fix_rounds": "11"}, "max_fix_rounds"),
    ({"fix": "f.md", "max_fix_rounds": "two"}, "max_fix_rounds"),
    ({"fix": "f.md", "on_fail_final": "fix"}, "on_fail_final"),
])
def test_gate_fix_plan_refuses(fields: dict[str, str], key: str) -> None:
    with pytest.raises(InvalidValue, match=key):
        gate_fix_plan(fields)


def test_on_fail_fix_is_a_gate_choice() -> None:
    assert gate_on_fail({"on_fail": "fix"}) is OnFail.FIX
