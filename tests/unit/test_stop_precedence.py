"""Stop-reason precedence: exit check passed > stop/finish signals > no progress >
stagnation > budget > time > max iterations, as the run-end decision applies it; the
distance to a threshold joins a budget or iteration-cap end."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from fractal.domain.run.outcome import RunEnd, RunFacts, Status, decide_run_end
from fractal.domain.run.stopcause import STOP_PRECEDENCE, StopCause, first_cause

BASE = RunFacts(run_id=4, last_iter=2, max_iters=None, budget_reason=None, setup_aborted=False,
                setup_failures=0, finish_drained=False, timed_out=False, walls_label="1h total",
                stopped=False, last_iter_ok=True)

# Each cause, as the facts the supervisor records for it.
CAUSES: dict[StopCause, dict[str, object]] = {
    StopCause.EXIT_CHECK: {"exit_check_passed": "pytest -q"},
    StopCause.SIGNAL: {"stopped": True},
    StopCause.NO_PROGRESS: {"no_progress": "t.py::test_a"},
    StopCause.STAGNATION: {"stagnation": "stagnation: score 0.71 -> 0.72"},
    StopCause.BUDGET: {"budget_reason": "cost budget reserve reached"},
    StopCause.TIME: {"timed_out": True},
    StopCause.MAX_ITERS: {"max_iters": 2},
}
ALONE: dict[StopCause, RunEnd] = {
    StopCause.EXIT_CHECK: RunEnd(Status.COMPLETED, Status.COMPLETED, 0,
                                 "exit check passed (pytest -q)"),
    StopCause.SIGNAL: RunEnd(Status.STOPPED, Status.STOPPED, 0, "Stopped by request"),
    StopCause.NO_PROGRESS: RunEnd(Status.EXITED, Status.EXITED, 1, "no progress: t.py::test_a"),
    StopCause.STAGNATION: RunEnd(Status.EXITED, Status.EXITED, 1,
                                 "stagnation: score 0.71 -> 0.72"),
    StopCause.BUDGET: RunEnd(Status.EXITED, Status.EXITED, 0, "cost budget reserve reached"),
    StopCause.TIME: RunEnd(Status.EXITED, Status.EXITED, 1,
                           "Timed out at iteration 4.2 (1h total)"),
    StopCause.MAX_ITERS: RunEnd(Status.COMPLETED, Status.COMPLETED, 0,
                                "Reached max iterations (2)"),
}


def _facts(*causes: StopCause) -> RunFacts:
    values: dict[str, object] = {}
    for cause in causes:
        values.update(CAUSES[cause])
    return replace(BASE, **values)  # type: ignore[arg-type]


def test_the_documented_order() -> None:
    assert STOP_PRECEDENCE == (StopCause.EXIT_CHECK, StopCause.SIGNAL, StopCause.NO_PROGRESS,
                               StopCause.STAGNATION, StopCause.BUDGET, StopCause.TIME,
                               StopCause.MAX_ITERS)


@pytest.mark.parametrize("holding", [
    combo for size in range(len(StopCause) + 1)
    for combo in itertools.combinations(StopCause, size)])
def test_first_cause_is_the_highest_ranked(holding: tuple[StopCause, ...]) -> None:
    expected = min(holding, key=STOP_PRECEDENCE.index) if holding else None
    assert first_cause(holding) is expected
    assert first_cause(reversed(holding)) is expected


@pytest.mark.parametrize("cause", list(StopCause))
def test_each_cause_alone(cause: StopCause) -> None:
    assert decide_run_end(_facts(cause)) == ALONE[cause]


@pytest.mark.parametrize("pair", list(itertools.combinations(StopCause, 2)),
                         ids=lambda p: " + ".join(c.name for c in p))
def test_issue7_causes_rank_by_precedence(pair: tuple[StopCause, StopCause]) -> None:
    """When an issue-7 cause wins a pair by precedence, it names the end; a passed exit
    check beats everything, no progress beats budget, time and max iterations."""
    high, low = pair
    end = decide_run_end(_facts(high, low))
    if high in (StopCause.EXIT_CHECK, StopCause.NO_PROGRESS, StopCause.STAGNATION):
        assert end == ALONE[high]
    if low in (StopCause.NO_PROGRESS, StopCause.STAGNATION):  # a stop or finish, a passed
        assert end == ALONE[high]  # check, or an identical failure outranks it


def test_everything_at_once_completes_on_the_exit_check() -> None:
    end = decide_run_end(_facts(*StopCause))
    assert end == ALONE[StopCause.EXIT_CHECK]


def test_finish_outranks_no_progress() -> None:
    end = decide_run_end(replace(_facts(StopCause.NO_PROGRESS, StopCause.BUDGET),
                                 finish_drained=True, budget_reason=None))
    assert end == RunEnd(Status.COMPLETED, Status.COMPLETED, 0, "Finished by request")


def test_no_progress_outranks_max_iters_with_a_failed_last_iteration() -> None:
    facts = replace(_facts(StopCause.NO_PROGRESS, StopCause.MAX_ITERS), last_iter_ok=False)
    assert decide_run_end(facts) == ALONE[StopCause.NO_PROGRESS]


def test_long_signatures_are_clipped() -> None:
    end = decide_run_end(replace(BASE, no_progress="t.py::test_" + "x" * 400))
    assert len(end.reason) == 250 and end.reason.startswith("no progress: t.py::test_x")


NOTE = "score 0.72 of 0.8 needed"


@pytest.mark.parametrize(("causes", "reason"), [
    ((StopCause.MAX_ITERS,), f"Reached max iterations (2); {NOTE}"),
    ((StopCause.BUDGET,), f"cost budget reserve reached; {NOTE}"),
    ((StopCause.BUDGET, StopCause.MAX_ITERS), f"cost budget reserve reached; {NOTE}"),
    ((StopCause.TIME, StopCause.MAX_ITERS), "Timed out at iteration 4.2 (1h total)"),
    ((StopCause.SIGNAL, StopCause.MAX_ITERS), "Stopped by request"),
    ((StopCause.STAGNATION, StopCause.MAX_ITERS), "stagnation: score 0.71 -> 0.72"),
    ((StopCause.STAGNATION, StopCause.BUDGET), "stagnation: score 0.71 -> 0.72"),
    ((StopCause.NO_PROGRESS, StopCause.STAGNATION), "no progress: t.py::test_a"),
])
def test_the_score_distance_joins_only_cap_and_budget_ends(causes: tuple[StopCause, ...],
                                                           reason: str) -> None:
    """Ties at one boundary: the ranked winner names the end; the distance to the
    threshold is added only when the winner is the budget or the iteration cap."""
    end = decide_run_end(replace(_facts(*causes), score_note=NOTE))
    assert end.reason == reason


def test_no_score_note_leaves_the_cap_reason_alone() -> None:
    assert decide_run_end(_facts(StopCause.MAX_ITERS)) == ALONE[StopCause.MAX_ITERS]
