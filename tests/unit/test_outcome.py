"""Status vocabulary, exit codes, launch attribution and the run-end matrix."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Any

import pytest

from fractal.domain.outcome import (
    EXIT_BUDGET_SKIP,
    EXIT_CANNOT_EXEC,
    EXIT_TIMEOUT,
    SETTLED,
    UNSETTLED,
    RunEnd,
    RunFacts,
    Status,
    StepOutcome,
    classify_launch,
    clip_reason,
    decide_run_end,
    exit_code_from_returncode,
    retry_reason,
    signal_exit_code,
)


def test_status_vocabulary() -> None:
    assert [s.value for s in Status] == [
        "active", "paused", "idle", "completed", "stopped", "exited", "killed", "failed",
        "retired", "missing"]
    assert {s.value for s in SETTLED} == {"completed", "stopped", "exited", "killed"}
    assert {s.value for s in UNSETTLED} == {"active", "paused", "idle"}
    assert not SETTLED & UNSETTLED
    assert Status("exited") is Status.EXITED
    assert f"{Status.EXITED}" == "exited"


def test_sentinels() -> None:
    assert (EXIT_TIMEOUT, EXIT_BUDGET_SKIP, EXIT_CANNOT_EXEC) == (124, 125, 127)


@pytest.mark.parametrize(("rc", "expected"), [
    (0, 0), (1, 1), (2, 2), (255, 255),
    (-signal.SIGTERM, 143), (-signal.SIGKILL, 137), (-signal.SIGINT, 130),
])
def test_exit_code_from_returncode(rc: int, expected: int) -> None:
    assert exit_code_from_returncode(rc) == expected


@pytest.mark.parametrize(("signum", "expected"), [(9, 137), (15, 143), (2, 130), (1, 129)])
def test_signal_exit_code(signum: int, expected: int) -> None:
    assert signal_exit_code(signum) == expected


@pytest.mark.parametrize(("text", "limit", "expected"), [
    ("plain", 250, "plain"),
    ("  a\n\tb\r\n  c  ", 250, "a b c"),
    ("line1\n\nline2", 250, "line1 line2"),
    ("", 250, ""),
    ("abcdef", 6, "abcdef"),
    ("abcdefg", 6, "abcde…"),
    ("abc   defg", 6, "abc d…"),  # collapsed first, then cut
    ("abcd efg", 6, "abcd…"),  # no dangling space before the ellipsis
    ("x" * 300, 250, "x" * 249 + "…"),
    ("abc", 0, ""),
])
def test_clip_reason(text: str, limit: int, expected: str) -> None:
    clipped = clip_reason(text, limit)
    assert clipped == expected
    assert len(clipped) <= max(limit, 0)


@pytest.mark.parametrize(("reason", "expected"), [
    ("agent error (exit 1): boom", "agent error (exit 1): boom; retry"),
    ("", "retry"),
    ("   ", "retry"),
])
def test_retry_reason(reason: str, expected: str) -> None:
    assert retry_reason(reason) == expected


def test_retry_reason_keeps_marker_within_cap() -> None:
    marked = retry_reason("y" * 400)
    assert marked.endswith("…; retry")
    assert len(marked) == 250


LAUNCH: dict[str, Any] = {
    "returncode": 0, "timed_out": False, "paused": False, "budget_stopped": False,
    "stream_error": None, "agent_error": None, "stderr_tail": "",
}


@pytest.mark.parametrize(("facts", "expected"), [
    # 1. budget stop with nonzero exit: a clean completion.
    ({"returncode": 1, "budget_stopped": True}, StepOutcome(Status.COMPLETED, 0, "")),
    ({"returncode": 1, "budget_stopped": True, "timed_out": True, "paused": True},
     StepOutcome(Status.COMPLETED, 0, "")),
    # 2. pause with nonzero exit (incl. the signal the pause sent).
    ({"returncode": -15, "paused": True}, StepOutcome(Status.PAUSED, 143, "")),
    ({"returncode": 1, "paused": True, "timed_out": True}, StepOutcome(Status.PAUSED, 1, "")),
    # 3. timed out, even when the agent exited 0 inside the grace.
    ({"returncode": -15, "timed_out": True}, StepOutcome(Status.EXITED, 124, "timed out")),
    ({"returncode": 0, "timed_out": True}, StepOutcome(Status.EXITED, 124, "timed out")),
    ({"returncode": 0, "timed_out": True, "paused": True, "budget_stopped": True},
     StepOutcome(Status.EXITED, 124, "timed out")),
    ({"returncode": 1, "timed_out": True, "stream_error": "x"},
     StepOutcome(Status.EXITED, 124, "timed out")),
    # 4. stream error (fractal's parser raised).
    ({"returncode": 0, "stream_error": "ValueError: bad json"},
     StepOutcome(Status.FAILED, 1, "stream error: ValueError: bad json")),
    ({"returncode": 3, "stream_error": "x", "agent_error": "y"},
     StepOutcome(Status.FAILED, 3, "stream error: x")),
    # 5. agent error reported on the agent's own stream.
    ({"returncode": 0, "agent_error": "codex reported an error: quota"},
     StepOutcome(Status.FAILED, 1, "agent error: codex reported an error: quota")),
    ({"returncode": 2, "agent_error": "bad", "stderr_tail": "ignored"},
     StepOutcome(Status.FAILED, 2, "agent error: bad")),
    # 6. nonzero exit: exit code and stderr tail, signals as 128+N.
    ({"returncode": 2, "stderr_tail": "usage:\n  agent [opts]\n"},
     StepOutcome(Status.FAILED, 2, "agent error (exit 2): usage: agent [opts]")),
    ({"returncode": -9, "stderr_tail": "Killed"},
     StepOutcome(Status.FAILED, 137, "agent error (exit 137): Killed")),
    ({"returncode": 1}, StepOutcome(Status.FAILED, 1, "agent error (exit 1)")),
    ({"returncode": 1, "paused": False, "budget_stopped": False, "stderr_tail": "  "},
     StepOutcome(Status.FAILED, 1, "agent error (exit 1)")),
    # No exit status at all: the agent could not be executed.
    ({"returncode": None, "stderr_tail": "No such file or directory: 'claude'"},
     StepOutcome(Status.FAILED, 127, "agent error (exit 127): No such file or directory: 'claude'")),
    # 7. clean exit.
    ({}, StepOutcome(Status.COMPLETED, 0, "")),
    ({"paused": True}, StepOutcome(Status.COMPLETED, 0, "")),  # exit 0 outranks a late pause
    ({"budget_stopped": True}, StepOutcome(Status.COMPLETED, 0, "")),
    ({"stderr_tail": "warnings only"}, StepOutcome(Status.COMPLETED, 0, "")),
])
def test_classify_launch(facts: dict[str, Any], expected: StepOutcome) -> None:
    assert classify_launch(**{**LAUNCH, **facts}) == expected


def test_classify_launch_clips_reasons() -> None:
    outcome = classify_launch(**{**LAUNCH, "returncode": 1, "stderr_tail": "e\n" * 400})
    assert outcome.reason.startswith("agent error (exit 1): e e e")
    assert len(outcome.reason) == 250
    assert outcome.reason.endswith("…")
    assert "\n" not in outcome.reason


BASE = RunFacts(run_id=2, last_iter=3, max_iters=None, budget_reason=None, setup_aborted=False,
                setup_failures=0, finish_drained=False, timed_out=False,
                walls_label="1h total", stopped=False, last_iter_ok=True)
EVERYTHING = replace(BASE, budget_reason="subtree cost budget reached (spent $5 >= $5 max)",
                     setup_aborted=True, setup_failures=3, finish_drained=True, timed_out=True,
                     stopped=True, max_iters=3, last_iter_ok=False)


def _end(status: Status, code: int, reason: str) -> RunEnd:
    return RunEnd(status, status, code, reason)


@pytest.mark.parametrize(("facts", "expected"), [
    # budget abort beats everything else.
    (EVERYTHING, _end(Status.EXITED, 0, "subtree cost budget reached (spent $5 >= $5 max)")),
    (replace(BASE, budget_reason="cost budget reserve reached"),
     _end(Status.EXITED, 0, "cost budget reserve reached")),
    # setup crash-loop.
    (replace(EVERYTHING, budget_reason=None), _end(Status.EXITED, 1, "setup failed x3")),
    # finish with the subtree drained.
    (replace(EVERYTHING, budget_reason=None, setup_aborted=False),
     _end(Status.COMPLETED, 0, "Finished by request")),
    # the node's own done: after a finish, before the walls, a stop and the iteration cap.
    (replace(EVERYTHING, budget_reason=None, setup_aborted=False, done="all merged"),
     _end(Status.COMPLETED, 0, "Finished by request")),
    (replace(EVERYTHING, budget_reason=None, setup_aborted=False, finish_drained=False,
             done="all merged"), _end(Status.COMPLETED, 0, "Done: all merged")),
    (replace(BASE, done="", max_iters=3, last_iter_ok=False), _end(Status.COMPLETED, 0, "Done")),
    (replace(BASE, done="  two\nlines "), _end(Status.COMPLETED, 0, "Done: two lines")),
    (replace(BASE, done="x", budget_reason="cost budget reserve reached"),
     _end(Status.EXITED, 0, "cost budget reserve reached")),
    (replace(BASE, done="x", no_progress="same failure"), _end(Status.COMPLETED, 0, "Done: x")),
    # run timeout.
    (replace(EVERYTHING, budget_reason=None, setup_aborted=False, finish_drained=False),
     _end(Status.EXITED, 1, "Timed out at iteration 2.3 (1h total)")),
    # stop.
    (replace(BASE, stopped=True, max_iters=3, last_iter_ok=False),
     _end(Status.STOPPED, 0, "Stopped by request")),
    # max iterations, last OK / last failed.
    (replace(BASE, max_iters=3), _end(Status.COMPLETED, 0, "Reached max iterations (3)")),
    (replace(BASE, max_iters=2), _end(Status.COMPLETED, 0, "Reached max iterations (2)")),
    (replace(BASE, max_iters=3, last_iter_ok=False),
     _end(Status.EXITED, 1, "Reached max iterations (3); final iteration failed")),
    # anything else.
    (replace(BASE, max_iters=4), _end(Status.EXITED, 1, "Exited at iteration 2.3")),
    (BASE, _end(Status.EXITED, 1, "Exited at iteration 2.3")),
    (replace(BASE, crash_reason="invalid step files x3"),
     _end(Status.EXITED, 1, "invalid step files x3")),
    (replace(BASE, crash_reason="x", stopped=True), _end(Status.STOPPED, 0, "Stopped by request")),
    (replace(BASE, last_iter=0, max_iters=5), _end(Status.EXITED, 1, "Exited at iteration 2.0")),
])
def test_decide_run_end(facts: RunFacts, expected: RunEnd) -> None:
    assert decide_run_end(facts) == expected


def test_run_end_reason_is_clipped() -> None:
    end = decide_run_end(replace(BASE, budget_reason="budget\n" + "z" * 400))
    assert len(end.reason) == 250
    assert end.reason.startswith("budget z")
