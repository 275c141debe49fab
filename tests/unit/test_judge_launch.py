"""How a launch of a real-CLI backend is recorded (launch.judge_launch): a missing final
event, an API error with its class, a final event followed by a hang, a budget stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.agents.base import Backend, ResultEvent
from fractal.agents.claude import ClaudeBackend
from fractal.agents.codex import CodexBackend
from fractal.agents.command import CommandBackend
from fractal.domain.run.outcome import Status, StepOutcome
from fractal.runtime.launch import judge_launch

CLAUDE = ClaudeBackend()
CODEX = CodexBackend()
COMMAND = CommandBackend(["agent"], Path("/wt"))
OK = ResultEvent(ok=True)
RATE = ResultEvent(ok=False, error="API Error: Request rejected (429)", error_kind="rate_limit",
                   api_status=429)
BUDGET = ResultEvent(ok=False, error="Reached maximum budget ($0.005)", budget_stopped=True)
HALT = ResultEvent(ok=False, error="error_during_execution (aborted_tools)")


@pytest.mark.parametrize(("backend", "result", "rc", "timed_out", "lingered", "tail", "expected"), [
    (CLAUDE, None, 0, False, False, "",
     StepOutcome(Status.FAILED, 1, "stream ended without a result (exit 0)")),
    (CLAUDE, None, -15, False, False, "",
     StepOutcome(Status.FAILED, 143, "stream ended without a result (exit 143)")),
    (CODEX, None, 1, False, False, "Reading additional input from stdin...",
     StepOutcome(Status.FAILED, 1, "stream ended without a result (exit 1): "
                 "Reading additional input from stdin...")),
    (COMMAND, None, 0, False, False, "", StepOutcome(Status.COMPLETED, 0, "")),
    (CLAUDE, None, -15, True, False, "", StepOutcome(Status.EXITED, 124, "timed out")),
    (CLAUDE, HALT, 1, True, False, "", StepOutcome(Status.EXITED, 124, "timed out")),
    (CLAUDE, OK, 0, False, False, "", StepOutcome(Status.COMPLETED, 0, "")),
    (CLAUDE, OK, -15, False, True, "", StepOutcome(Status.COMPLETED, 0, "")),  # lingered
    (CLAUDE, RATE, 1, False, False, "",
     StepOutcome(Status.FAILED, 1,
                 "agent error: rate_limit (HTTP 429): API Error: Request rejected (429)")),
    (CLAUDE, RATE, -15, False, True, "",
     StepOutcome(Status.FAILED, 143,
                 "agent error: rate_limit (HTTP 429): API Error: Request rejected (429)")),
    (CLAUDE, BUDGET, 1, False, False, "", StepOutcome(Status.COMPLETED, 0, "")),
    (CLAUDE, HALT, 1, False, False, "",
     StepOutcome(Status.FAILED, 1, "agent error: error_during_execution (aborted_tools)")),
], ids=["no-result-exit-0", "no-result-killed", "no-result-tail", "command-needs-none",
        "timeout-without-result", "timeout-with-result", "ok", "ok-then-hang", "api-error",
        "api-error-then-hang", "budget-stop", "interrupted"])
def test_judge_launch(backend: Backend, result: ResultEvent | None, rc: int, timed_out: bool,
                      lingered: bool, tail: str, expected: StepOutcome) -> None:
    assert judge_launch(backend, result, rc, timed_out=timed_out, lingered=lingered,
                        stream_error=None, stderr_tail=tail) == expected


def test_a_parser_failure_is_a_stream_error_not_a_missing_result() -> None:
    outcome = judge_launch(CLAUDE, None, 0, timed_out=False, lingered=False,
                           stream_error="ValueError: boom", stderr_tail="")
    assert outcome == StepOutcome(Status.FAILED, 1, "stream error: ValueError: boom")
