"""The no-progress rule, the run's check memory, the CHECK_* variables and gate frontmatter."""

from __future__ import annotations

import pytest

from fractal.domain.checks.progress import Streak, advance_streak, is_silent, is_stalled
from fractal.domain.checks.rules import (
    CHECK_VARIABLES,
    CheckKind,
    CheckResult,
    CheckTrack,
    OnFail,
    check_variables,
    gate_command,
    gate_on_fail,
    output_tail,
    visible_check,
)
from fractal.domain.checks.signature import CheckSummary
from fractal.domain.errors import InvalidValue

A, B = "t.py::test_a", "t.py::test_b"


@pytest.mark.parametrize(("streak", "signature", "failures", "expected"), [
    (None, A, 3, Streak(A, 3, 1)),                       # the first red check
    (Streak(A, 3, 1), A, 3, Streak(A, 3, 2)),            # same way again
    (Streak(A, 3, 2), A, 3, Streak(A, 3, 3)),
    (Streak(A, 3, 2), B, 3, Streak(B, 3, 1)),            # a changed signature resets
    (Streak(A, 3, 2), A, 2, Streak(A, 2, 1)),            # fewer failures reset
    (Streak(A, 2, 2), A, 5, Streak(A, 5, 3)),            # more failures do not
    (Streak(A, None, 1), A, 2, Streak(A, 2, 2)),         # an unknown count cannot reset
    (Streak(A, 2, 1), A, None, Streak(A, None, 2)),
])
def test_advance_streak(streak: Streak | None, signature: str, failures: int | None,
                        expected: Streak) -> None:
    assert advance_streak(streak, signature, failures) == expected


@pytest.mark.parametrize(("streak", "signature", "failures", "expected"), [
    (None, "exit 1", None, None),                        # a silent check starts nothing
    (Streak("exit 1", None, 1), "exit 1", None, None),   # ...and is never compared
    (Streak(A, 3, 1), "exit 1", None, None),             # it ends a counted streak
    (Streak(A, 3, 1), "", None, None),
    (None, "exit 1", 3, None),                           # a count alone says no more
    (None, "exit code 1 from make", None, Streak("exit code 1 from make", None, 1)),
    (None, "timed out after 10s", None, Streak("timed out after 10s", None, 1)),
])
def test_a_silent_check_never_counts_towards_no_progress(
        streak: Streak | None, signature: str, failures: int | None,
        expected: Streak | None) -> None:
    assert advance_streak(streak, signature, failures) == expected


@pytest.mark.parametrize(("signature", "silent"), [
    ("", True), ("exit 1", True), ("exit 124", True), ("exit ", False), ("exit x", False),
    ("exit 1 of 3 jobs", False), (A, False), ("ERROR: still broken", False),
])
def test_is_silent(signature: str, silent: bool) -> None:
    assert is_silent(signature) is silent


@pytest.mark.parametrize(("streak", "limit", "expected"), [
    (None, 2, False),
    (Streak(A, 1, 1), 2, False),
    (Streak(A, 1, 2), 2, True),
    (Streak(A, 1, 3), 2, True),
    (Streak(A, 1, 1), 1, True),
    (Streak(A, 1, 50), None, False),  # null disables the stop
])
def test_is_stalled(streak: Streak | None, limit: int | None, expected: bool) -> None:
    assert is_stalled(streak, limit) is expected


def _result(code: int, signature: str = "", failures: int | None = None, *,
            iteration: int = 1, kind: CheckKind = CheckKind.EXIT,
            command: str = "pytest -q") -> CheckResult:
    return CheckResult(kind=kind, command=command, exit_code=code, seconds=1.5,
                       tail="last lines", output_file="/n/tmp/checks/3-1.log",
                       summary=CheckSummary(signature, failures, None), iteration=iteration)


def test_track_stalls_after_two_identical_red_checks() -> None:
    track = CheckTrack().after_exit_check(_result(1, A, 2), 2)
    assert (track.streak, track.stalled, track.passed) == (Streak(A, 2, 1), None, None)
    track = track.after_exit_check(_result(1, A, 2, iteration=2), 2)
    assert track.stalled == A and track.streak == Streak(A, 2, 2)


def test_track_progress_and_pass() -> None:
    track = CheckTrack()
    for iteration, (sig, count) in enumerate([(f"{A}, {B}", 2), (A, 1)], start=1):
        track = track.after_exit_check(_result(1, sig, count, iteration=iteration), 2)
        assert track.stalled is None
    track = track.after_exit_check(_result(0, iteration=3), 2)
    assert (track.passed, track.streak, track.stalled) == ("pytest -q", None, None)


def test_track_without_limit_never_stalls() -> None:
    track = CheckTrack()
    for iteration in range(1, 6):
        track = track.after_exit_check(_result(1, A, 1, iteration=iteration), None)
    assert track.stalled is None and track.streak == Streak(A, 1, 5)


def test_gates_feed_prompts_but_not_the_streak() -> None:
    track = CheckTrack().after_exit_check(_result(1, A, 1), 2)
    gate = _result(1, B, 4, iteration=2, kind=CheckKind.GATE, command="make lint")
    track = track.after_gate(gate)
    assert track.last == gate and track.streak == Streak(A, 1, 1)


@pytest.mark.parametrize(("last_iteration", "iteration", "visible"), [
    (3, 3, True),   # a gate earlier in this iteration
    (2, 3, True),   # the previous iteration's exit check
    (1, 3, False),  # older: stale
])
def test_visible_check(last_iteration: int, iteration: int, visible: bool) -> None:
    result = _result(1, A, iteration=last_iteration)
    track = CheckTrack(last=result)
    assert visible_check(track, iteration) == (result if visible else None)
    assert visible_check(CheckTrack(), iteration) is None


def test_check_variables() -> None:
    assert check_variables(None) == {
        "CHECK_STATUS": "none", "CHECK_COMMAND": "", "CHECK_OUTPUT": "",
        "CHECK_OUTPUT_FILE": "", "CHECK_SIGNATURE": "", "CHECK_FAILURES": "",
        "CHECK_SCORE": "", "CHECK_EXIT_CODE": "", "CHECK_FAILING_IDS": ""}
    red = check_variables(_result(1, A, 3))
    assert red == {"CHECK_STATUS": "fail", "CHECK_COMMAND": "pytest -q",
                   "CHECK_OUTPUT": "last lines", "CHECK_OUTPUT_FILE": "/n/tmp/checks/3-1.log",
                   "CHECK_SIGNATURE": A, "CHECK_FAILURES": "3", "CHECK_SCORE": "",
                   "CHECK_EXIT_CODE": "1", "CHECK_FAILING_IDS": "\n".join(sorted(A.split(", ")))}
    green = check_variables(_result(0, "", None))
    assert green["CHECK_STATUS"] == "pass" and green["CHECK_FAILURES"] == ""
    assert set(red) == set(CHECK_VARIABLES)


@pytest.mark.parametrize(("text", "lines", "chars", "expected"), [
    ("a\nb\nc\n\n", 2, 100, "b\nc"),
    ("a\nb\nc", 10, 100, "a\nb\nc"),
    ("", 5, 100, ""),
    ("aaaa\nbbbb\ncccc", 10, 7, "cccc"),  # cut at a line boundary
    ("x" * 20, 10, 5, "xxxxx"),           # one long line: its end
])
def test_output_tail(text: str, lines: int, chars: int, expected: str) -> None:
    assert output_tail(text, lines, chars) == expected


def test_output_tail_keeps_the_last_200_lines_by_default() -> None:
    text = "\n".join(f"line {n}" for n in range(1, 501))
    kept = output_tail(text).splitlines()
    assert len(kept) == 200 and kept[0] == "line 301" and kept[-1] == "line 500"


@pytest.mark.parametrize(("fields", "command", "on_fail"), [
    ({}, None, OnFail.CONTINUE),
    ({"check": "pytest -q"}, "pytest -q", OnFail.CONTINUE),
    ({"check": " make test ", "on_fail": "stop-iteration"}, "make test", OnFail.STOP_ITERATION),
    ({"check": "x", "on_fail": "continue"}, "x", OnFail.CONTINUE),
])
def test_gate_frontmatter(fields: dict[str, str], command: str | None, on_fail: OnFail) -> None:
    assert gate_command(fields) == command
    assert gate_on_fail(fields) is on_fail


def test_gate_on_fail_refuses_other_values() -> None:
    with pytest.raises(InvalidValue, match="continue, stop-iteration"):
        gate_on_fail({"on_fail": "stop"})
