"""Retries in-process: a failed launch gets ``step_retries`` more attempts, each its own
row, ``step_retry_backoff`` seconds apart on the clock; a stop ends the backoff (the last
failure stands), a pause parks the run in it."""

from __future__ import annotations

import itertools

import pytest

from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


@pytest.mark.parametrize(("retries", "failing", "rows", "iteration"), [
    (2, 1, [("failed", 1), ("completed", 0)], "completed"),
    (2, 2, [("failed", 1), ("failed", 1), ("completed", 0)], "completed"),
    (1, 2, [("failed", 1), ("failed", 1)], "failed"),
    (0, 1, [("failed", 1)], "failed"),
])
def test_retries_and_their_rows(loop_tree: LoopTree, retries: int, failing: int,
                                rows: list[tuple[str, int]], iteration: str) -> None:
    t = loop_tree
    t.node("r", {"01-WORK.md": f"[stub:fail-first={failing}]"}, "--no-sync", "--max-iters",
           "1", "--step-retries", str(retries), "--step-retry-backoff", "7s")
    t.run("r")
    steps = t.steps("r")
    assert [(s[1], s[2]) for s in steps] == rows
    assert all(s[3].endswith("retry") or s[3].endswith("; retry; unpriced")
               for s in steps[1:])  # every later attempt is marked a retry
    assert [r[1] for r in t.iterations("r")] == [iteration]
    starts = [c.started_at for c in t.launcher.calls]
    assert all(b - a == pytest.approx(7.0) for a, b in itertools.pairwise(starts))
    # each attempt resumes the session the failed one had started
    sessions = [c.env["FRACTAL_SESSION_ID"] for c in t.launcher.calls]
    assert sessions[0] == "" and all(s and s == sessions[1] for s in sessions[1:])


def test_a_stop_ends_the_backoff_and_the_last_failure_stands(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("r", {"01-WORK.md": "[stub:fail=3]", "02-NEXT.md": "next"}, "--no-sync",
           "--step-retries", "5", "--step-retry-backoff", "1h")
    t.clock.after(60, lambda: t.cli("node", "stop", "r"))
    t.run("r")
    assert [s[:3] for s in t.steps("r")] == [("WORK", "failed", 3), ("NEXT", "stopped", 0)]
    assert t.run_row("r") == ("stopped", 0, "Stopped by request")
    assert t.clock.elapsed() < 120


def test_a_pause_in_the_backoff_parks_and_the_resume_retries(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("r", {"01-WORK.md": "[stub:fail-first=1]"}, "--no-sync", "--max-iters", "1",
           "--step-retries", "1", "--step-retry-backoff", "1h")
    t.clock.after(60, lambda: t.cli("node", "pause", "r"))
    t.run("r")
    assert t.status("r") == "paused"
    events = t.sql("SELECT metadata FROM events WHERE event = 'pause' AND actor = 'loop'")
    assert events == [("parked during a retry backoff",)]
    assert "Run paused during a retry backoff;" in t.pane()  # "paused" said once
    t.run("r", resume=True)
    assert t.run_row("r") == ("completed", 0, "Reached max iterations (1)")
    assert [s[1] for s in t.steps("r")] == ["failed", "completed"]


def test_a_failed_final_iteration_names_the_failure_not_the_retry(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("r", {"01-WORK.md": "[stub:fail=3]"}, "--no-sync", "--max-iters", "1",
           "--step-retries", "1", "--step-retry-backoff", "1s")
    t.run("r")
    steps = t.steps("r")
    assert "retry" in steps[-1][3]  # the attempt's own row keeps its marker
    (reason,) = [r[0] for r in t.sql("SELECT metadata FROM iterations")]
    assert reason.startswith("failed on WORK: agent error (exit 3)"), reason
    assert "retry" not in reason.split("; "), reason
