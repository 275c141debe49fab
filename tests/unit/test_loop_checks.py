"""Checks run by the loop, in-process: the exit check ends a run when green, stops it when
it makes no progress, and gate steps feed their diagnostics into later prompts. The check
commands are real processes; the agent is scripted. Moved down from
tests/e2e/test_checks.py, same assertions."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from tests.helpers import check_rows, git
from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]

SAMPLE_TESTS = '''\
from pathlib import Path


def _fixed():
    progress = Path(__file__).resolve().parent.parent / "progress.txt"
    return len(progress.read_text().splitlines()) if progress.exists() else 0


def test_first():
    assert _fixed() >= 1


def test_second():
    assert _fixed() >= 2


def test_third():
    assert _fixed() >= 3
'''
PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider tests_sample"
IDS = [f"tests_sample/test_progress.py::test_{n}" for n in ("first", "second", "third")]


def _sample_node(t: LoopTree, name: str, steps: dict[str, str], *opts: str) -> Path:
    """A node whose worktree holds the three-test sample project, committed."""
    ndir = t.node(name, steps, *opts)
    worktree = t.worktree(name)
    (worktree / "tests_sample").mkdir()
    (worktree / "tests_sample" / "test_progress.py").write_text(SAMPLE_TESTS)
    (worktree / ".gitignore").write_text("__pycache__/\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", "sample project", "--no-verify")
    return ndir


def test_exit_check_completes_the_run_when_green(loop_tree: LoopTree) -> None:
    """The agent fixes one of three failing tests per iteration: green at iteration 3."""
    t = loop_tree
    step = ("Fix one test. [stub:append=progress.txt:fixed]\n"
            "Last check: $CHECK_STATUS, $CHECK_FAILURES failing: $CHECK_SIGNATURE\n")
    ndir = _sample_node(t, "fixer", {"01-FIX.md": step}, "--no-sync", "--max-iters", "6",
                        "--exit-check", PYTEST)
    t.run("fixer")
    assert t.status("fixer") == "completed"

    (run_id, status, code, reason), = t.sql("SELECT run_id, status, exit_code, metadata "
                                            "FROM runs")
    assert (status, code, reason) == ("completed", 0, f"exit check passed ({PYTEST})")
    assert t.sql("SELECT iter, status FROM iterations ORDER BY iter") == [
        (1, "completed"), (2, "completed"), (3, "completed")]
    rows = check_rows(t, "fixer")
    assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
        ("exit", 1, 1, ", ".join(IDS[1:]), 2, 1),
        ("exit", 2, 1, IDS[2], 1, 2),
        ("exit", 3, 0, "", 0, 3),
    ]
    for (_k, iteration, *_rest, output, _step) in rows:
        log = ndir / "tmp" / "checks" / f"{run_id}-{iteration}.log"
        assert output == str(log) and log.is_file()
    assert "1 failed, 2 passed" in (ndir / "tmp" / "checks" / f"{run_id}-2.log").read_text()

    # The red check of one iteration is the diagnostics of the next.
    prompts = t.launcher.calls
    assert "Last check: none, " in prompts[0].prompt
    assert f"Last check: fail, 2 failing: {IDS[1]}, {IDS[2]}" in prompts[1].prompt
    assert f"Last check: fail, 1 failing: {IDS[2]}" in prompts[2].prompt
    env = prompts[2].env
    assert (env["CHECK_STATUS"], env["CHECK_COMMAND"], env["CHECK_FAILURES"]) == (
        "fail", PYTEST, "1")
    assert "1 failed, 2 passed" in env["CHECK_OUTPUT"]

    # Visible: node checks (with the trend) and node activity.
    report = json.loads(t.cli("node", "checks", "fixer", "--json").stdout)
    assert [p["failures"] for p in report["trend"]] == [2, 1, 0]
    assert [c["status"] for c in report["checks"]] == ["failed", "failed", "passed"]
    activity = json.loads(t.cli("node", "activity", "fixer", "--json").stdout)
    checks = [r for r in activity if r["kind"] == "check"]
    assert [(r["event"], r["status"], r["exit"]) for r in checks] == [
        ("exit-check", "passed", 0), ("exit-check", "failed", 1), ("exit-check", "failed", 1)]
    assert checks[-1]["reason"] == f"{PYTEST} | {IDS[1]}, {IDS[2]}"
    assert t.cli("node", "status", "fixer").stdout.strip() == (
        f"completed (exit check passed ({PYTEST}))")


def test_no_progress_ends_the_run_at_iteration_2(loop_tree: LoopTree) -> None:
    """An agent that changes nothing fails the check the same way twice: the run stops."""
    t = loop_tree
    _sample_node(t, "stuck", {"01-IDLE.md": "Change nothing.\n"}, "--no-sync",
                 "--max-iters", "5", "--exit-check", PYTEST)
    t.run("stuck")
    assert t.status("stuck") == "exited"
    reason = f"no progress: {', '.join(IDS)}"
    assert t.sql("SELECT status, exit_code, metadata FROM runs") == [("exited", 1, reason)]
    assert [r[1] for r in check_rows(t, "stuck")] == [1, 2]
    assert t.sql("SELECT COUNT(*) FROM iterations") == [(2,)]
    notice = t.sql("SELECT subject FROM messages WHERE node = 'main.stuck'")
    assert notice == [(f"run exited: {reason}",)]
    table = t.cli("node", "checks", "stuck", "--csv").stdout.splitlines()
    assert table[0].startswith("ref,kind,step,status,exit,failures")
    assert len(table) == 3


def test_gate_output_feeds_the_next_prompt(loop_tree: LoopTree) -> None:
    t = loop_tree
    gate = ("---\ncheck: printf 'lint line one\\nERROR: bad thing at 0x1f\\n'; exit 3\n---\n"
            "Runs the linter.\n")
    fix = ("Fix it.\nStatus: $CHECK_STATUS ($CHECK_SIGNATURE)\n"
           "<<<\n$CHECK_OUTPUT\n>>>\nLog: $CHECK_OUTPUT_FILE\n")
    ndir = t.node("gated", {"01-LINT.md": gate, "02-FIX.md": fix}, "--no-sync",
                  "--max-iters", "1")
    t.run("gated")
    assert t.status("gated") == "completed"

    (run_id,), = t.sql("SELECT run_id FROM runs")
    steps = t.sql("SELECT step_id, step, step_name, status, exit_code, metadata, cost "
                  "FROM steps ORDER BY step_id")
    assert [s[1:] for s in steps] == [(1, "LINT", "failed", 3, "check failed (exit 3)", 0.0),
                                      (2, "FIX", "completed", 0, "", None)]
    log = ndir / "tmp" / "checks" / f"{run_id}-1-1.log"
    (kind, _iter, code, signature, _f, _p, output, step_id), = check_rows(t, "gated")
    assert (kind, code, signature, output, step_id) == (
        "gate", 3, "ERROR: bad thing at <addr>", str(log), steps[0][0])

    (call,) = t.launcher.calls
    assert "Status: fail (ERROR: bad thing at <addr>)" in call.prompt
    assert "<<<\nlint line one\nERROR: bad thing at 0x1f\n>>>" in call.prompt
    assert f"Log: {log}" in call.prompt
    assert call.env["CHECK_OUTPUT"] == "lint line one\nERROR: bad thing at 0x1f"
    assert call.env["CHECK_STATUS"] == "fail"
    activity = json.loads(t.cli("node", "activity", "gated", "--json").stdout)
    gate_rows = [r for r in activity if r["kind"] == "check"]
    assert [(r["event"], r["step"], r["status"]) for r in gate_rows] == [
        ("gate", "1 LINT", "failed")]


def test_gate_on_fail_stop_iteration(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {
        "01-OK.md": "---\ncheck: true\n---\n",
        "02-GATE.md": "---\ncheck: echo 'FAILED t.py::test_x - boom'; exit 1\n"
                      "on_fail: stop-iteration\n---\n",
        "03-WORK.md": "never runs\n",
    }
    t.node("strict", steps, "--no-sync", "--max-iters", "1")
    t.run("strict")
    assert t.status("strict") == "exited"
    assert t.sql("SELECT step_name, status, exit_code, metadata FROM steps "
                 "ORDER BY step_id") == [
        ("OK", "completed", 0, ""),
        ("GATE", "failed", 1, "check failed (exit 1)"),
        ("WORK", "stopped", 0, "failed on GATE"),
    ]
    assert t.sql("SELECT status, metadata FROM iterations") == [
        ("failed", "failed on GATE: check failed (exit 1)")]
    assert [r[3] for r in check_rows(t, "strict")] == ["", "t.py::test_x"]
    assert t.launcher.calls == []


def test_a_resumed_run_keeps_its_diagnostics_and_its_streak(loop_tree: LoopTree) -> None:
    """Pause while iteration 2 runs, resume: the new supervisor rebuilds the last check
    result (for the prompt) and the no-progress streak from the check rows."""
    t = loop_tree
    step = "[stub:sleep=30]\nCheck: $CHECK_STATUS ($CHECK_SIGNATURE)\n"
    t.node("resumer", {"01-WORK.md": step}, "--no-sync", "--max-iters", "5",
           "--exit-check", "echo 'ERROR: still broken'; exit 1")

    def pause_in_iteration_2(call: FakeCall) -> None:
        if call.env.get("ITER") == "2" and len(t.launcher.calls) == 2:
            t.clock.after(5, lambda: t.cli("node", "pause", "resumer"))
    t.launcher.on_spawn.append(pause_in_iteration_2)
    t.run("resumer")
    assert t.status("resumer") == "paused"
    t.run("resumer", resume=True)
    assert t.status("resumer") == "exited"

    assert t.sql("SELECT metadata FROM runs") == [("no progress: ERROR: still broken",)]
    assert t.sql("SELECT COUNT(*) FROM iterations") == [(2,)]
    prompts = [c.prompt for c in t.launcher.calls]
    assert len(prompts) == 3
    assert "Check: none ()" in prompts[0]
    assert "Check: fail (ERROR: still broken)" in prompts[1]
    assert "Check: fail (ERROR: still broken)" in prompts[2]  # after the resume


def test_a_silent_exit_check_is_never_judged_no_progress(loop_tree: LoopTree) -> None:
    """`test $(wc -l < progress.txt) -ge 3` prints nothing: each red round reads `exit 1`,
    which cannot tell a growing file from a stuck one, so the run goes on until it passes."""
    t = loop_tree
    t.node("grows", {"01-WORK.md": "[stub:append=progress.txt:line]"}, "--no-sync",
           "--max-iters", "5", "--exit-check", "test $(wc -l < progress.txt) -ge 3")
    t.run("grows")
    assert t.run_row("grows")[:2] == ("completed", 0)
    assert [r[3] for r in check_rows(t, "grows")] == ["exit 1", "exit 1", ""]


def test_a_silent_exit_check_runs_until_another_limit(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("mute", {"01-WORK.md": "work"}, "--no-sync", "--max-iters", "3",
           "--exit-check", "exit 1")
    t.run("mute")
    assert t.run_row("mute") == ("exited", 1, "Reached max iterations (3); final iteration "
                                          "failed")  # never `no progress: exit 1`
    assert [r[3] for r in check_rows(t, "mute")] == ["exit 1"] * 3
