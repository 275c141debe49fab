"""Checks run by fractal itself (issue 7): the exit check ends a run when green, stops it
when it makes no progress, and gate steps feed their diagnostics into later prompts."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

pytestmark = pytest.mark.e2e

# Three tests; the k-th passes once progress.txt holds k lines (one "fix" per line).
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
FAST_KILL = {**os.environ, "FRACTAL_KILL_GRACE": "1"}


def _sample_node(tree: Tree, name: str, steps: dict[str, str], *opts: str) -> Path:
    """A node whose worktree holds the three-test sample project, committed."""
    ndir = tree.node(name, steps, *opts)
    worktree = tree.worktree(name)
    (worktree / "tests_sample").mkdir()
    (worktree / "tests_sample" / "test_progress.py").write_text(SAMPLE_TESTS)
    (worktree / ".gitignore").write_text("__pycache__/\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", "sample project", "--no-verify")
    return ndir


def _checks(tree: Tree, name: str) -> list[tuple[object, ...]]:
    return tree.sql("SELECT c.kind, i.iter, c.exit_code, c.signature, c.failures, c.passed, "
                    "c.output_path, c.step_id FROM checks c JOIN iterations i "
                    "ON i.iter_id = c.iter_id WHERE c.node = ? ORDER BY c.check_id",
                    f"main.{name}")


def test_exit_check_completes_the_run_when_green(tree: Tree) -> None:
    """The stub fixes one of three failing tests per iteration: green at iteration 3."""
    capture = tree.repo.parent / "capture"
    step = (f"Fix one test. [stub:append=progress.txt:fixed] [stub:capture={capture}]\n"
            "Last check: $CHECK_STATUS, $CHECK_FAILURES failing: $CHECK_SIGNATURE\n")
    ndir = _sample_node(tree, "fixer", {"01-FIX.md": step}, "--no-sync", "--max-iters", "6",
                        "--exit-check", PYTEST)
    tree.cli("node", "start", "fixer")
    assert tree.wait_settled("fixer", timeout=90) == "completed"

    (run_id, status, code, reason), = tree.sql("SELECT run_id, status, exit_code, metadata "
                                               "FROM runs")
    assert (status, code, reason) == ("completed", 0, f"exit check passed ({PYTEST})")
    assert tree.sql("SELECT iter, status FROM iterations ORDER BY iter") == [
        (1, "completed"), (2, "completed"), (3, "completed")]
    rows = _checks(tree, "fixer")
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
    prompts = [json.loads((capture / f"call-{n}.json").read_text()) for n in (1, 2, 3)]
    assert "Last check: none, " in prompts[0]["prompt"]
    assert f"Last check: fail, 2 failing: {IDS[1]}, {IDS[2]}" in prompts[1]["prompt"]
    assert f"Last check: fail, 1 failing: {IDS[2]}" in prompts[2]["prompt"]
    env = prompts[2]["env"]
    assert (env["CHECK_STATUS"], env["CHECK_COMMAND"], env["CHECK_FAILURES"]) == (
        "fail", PYTEST, "1")
    assert "1 failed, 2 passed" in env["CHECK_OUTPUT"]

    # Visible: node checks (with the trend) and node activity.
    report = json.loads(tree.cli("node", "checks", "fixer", "--json").stdout)
    assert [p["failures"] for p in report["trend"]] == [2, 1, 0]
    assert [c["status"] for c in report["checks"]] == ["failed", "failed", "passed"]
    activity = json.loads(tree.cli("node", "activity", "fixer", "--json").stdout)
    checks = [r for r in activity if r["kind"] == "check"]
    assert [(r["event"], r["status"], r["exit"]) for r in checks] == [
        ("exit-check", "passed", 0), ("exit-check", "failed", 1), ("exit-check", "failed", 1)]
    assert checks[-1]["reason"] == f"{PYTEST} | {IDS[1]}, {IDS[2]}"
    assert tree.cli("node", "status", "fixer").stdout.strip() == (
        f"completed (exit check passed ({PYTEST}))")


def test_no_progress_ends_the_run_at_iteration_2(tree: Tree) -> None:
    """A stub that changes nothing fails the check the same way twice: the run stops."""
    _sample_node(tree, "stuck", {"01-IDLE.md": "Change nothing.\n"}, "--no-sync",
                 "--max-iters", "5", "--exit-check", PYTEST)
    tree.cli("node", "start", "stuck")
    assert tree.wait_settled("stuck", timeout=90) == "exited"
    reason = f"no progress: {', '.join(IDS)}"
    assert tree.sql("SELECT status, exit_code, metadata FROM runs") == [("exited", 1, reason)]
    assert [r[1] for r in _checks(tree, "stuck")] == [1, 2]
    assert tree.sql("SELECT COUNT(*) FROM iterations") == [(2,)]
    notice = tree.sql("SELECT subject FROM messages WHERE node = 'main.stuck'")
    assert notice == [(f"run exited: {reason}",)]
    table = tree.cli("node", "checks", "stuck", "--csv").stdout.splitlines()
    assert table[0].startswith("ref,kind,step,status,exit,failures")
    assert len(table) == 3


def test_a_check_that_hangs_is_stopped_at_check_timeout(tree: Tree) -> None:
    """The check runs as a process group under check_timeout: a hang is killed (exit 124),
    and the same timeout twice is no progress."""
    tree.node("slow", {"01-IDLE.md": "Nothing.\n"}, "--no-sync", "--max-iters", "4",
              "--exit-check", "echo starting; sleep 60", "--check-timeout", "1s")
    tree.cli("node", "start", "slow", env=FAST_KILL)
    assert tree.wait_settled("slow", timeout=60) == "exited"
    rows = _checks(tree, "slow")
    assert [(r[2], r[3], r[4]) for r in rows] == [(124, "timed out after 1s", None)] * 2, rows
    assert tree.sql("SELECT metadata FROM runs") == [("no progress: timed out after 1s",)]


def test_gate_output_feeds_the_next_prompt(tree: Tree) -> None:
    capture = tree.repo.parent / "capture"
    gate = ("---\ncheck: printf 'lint line one\\nERROR: bad thing at 0x1f\\n'; exit 3\n---\n"
            "Runs the linter.\n")
    fix = (f"Fix it. [stub:capture={capture}]\nStatus: $CHECK_STATUS ($CHECK_SIGNATURE)\n"
           "<<<\n$CHECK_OUTPUT\n>>>\nLog: $CHECK_OUTPUT_FILE\n")
    ndir = tree.node("gated", {"01-LINT.md": gate, "02-FIX.md": fix}, "--no-sync",
                     "--max-iters", "1")
    tree.cli("node", "start", "gated")
    assert tree.wait_settled("gated") == "completed"

    (run_id,), = tree.sql("SELECT run_id FROM runs")
    steps = tree.sql("SELECT step_id, step, step_name, status, exit_code, metadata, cost "
                     "FROM steps ORDER BY step_id")
    assert [s[1:] for s in steps] == [(1, "LINT", "failed", 3, "check failed (exit 3)", 0.0),
                                      (2, "FIX", "completed", 0, "", None)]
    log = ndir / "tmp" / "checks" / f"{run_id}-1-1.log"
    (kind, _iter, code, signature, _f, _p, output, step_id), = _checks(tree, "gated")
    assert (kind, code, signature, output, step_id) == (
        "gate", 3, "ERROR: bad thing at <addr>", str(log), steps[0][0])

    call = json.loads((capture / "call-1.json").read_text())
    prompt = call["prompt"]
    assert "Status: fail (ERROR: bad thing at <addr>)" in prompt
    assert "<<<\nlint line one\nERROR: bad thing at 0x1f\n>>>" in prompt
    assert f"Log: {log}" in prompt
    assert call["env"]["CHECK_OUTPUT"] == "lint line one\nERROR: bad thing at 0x1f"
    assert call["env"]["CHECK_STATUS"] == "fail"
    activity = json.loads(tree.cli("node", "activity", "gated", "--json").stdout)
    gate_rows = [r for r in activity if r["kind"] == "check"]
    assert [(r["event"], r["step"], r["status"]) for r in gate_rows] == [
        ("gate", "1 LINT", "failed")]


def test_gate_on_fail_stop_iteration(tree: Tree) -> None:
    steps = {
        "01-OK.md": "---\ncheck: true\n---\n",
        "02-GATE.md": "---\ncheck: echo 'FAILED t.py::test_x - boom'; exit 1\n"
                      "on_fail: stop-iteration\n---\n",
        "03-WORK.md": "never runs\n",
    }
    tree.node("strict", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "strict")
    assert tree.wait_settled("strict") == "exited"
    assert tree.sql("SELECT step_name, status, exit_code, metadata FROM steps "
                    "ORDER BY step_id") == [
        ("OK", "completed", 0, ""),
        ("GATE", "failed", 1, "check failed (exit 1)"),
        ("WORK", "stopped", 0, "failed on GATE"),
    ]
    assert tree.sql("SELECT status, metadata FROM iterations") == [
        ("failed", "failed on GATE: check failed (exit 1)")]
    assert [r[3] for r in _checks(tree, "strict")] == ["", "t.py::test_x"]


def test_node_init_exit_check_seeds_the_gate_and_the_keys(tree: Tree) -> None:
    tree.cli("node", "init", "seeded", "--exit-check", "make test", "--no-progress", "3")
    steps = tree.node_dir("seeded") / "steps"
    assert sorted(p.name for p in steps.iterdir()) == [
        "00-PREPARE.md", "01-PLAN.md", "02-EXECUTE.md", "03-CHECK.md", "04-REVIEW.md",
        "05-COMMIT.md"]
    gate = (steps / "03-CHECK.md").read_text()
    assert gate.startswith("---\ncheck: make test\non_fail: continue\n---\n")
    assert "$CHECK_OUTPUT" in (steps / "02-EXECUTE.md").read_text()
    config = tree.config("seeded")
    assert (config["exit_check"], config["check_timeout"], config["no_progress"]) == (
        "make test", "10m", 3)
    assert git(tree.worktree("seeded"), "status", "--porcelain") == ""  # in the init commit

    tree.cli("node", "init", "plain", "--no-progress", "null")
    assert sorted(p.name for p in (tree.node_dir("plain") / "steps").iterdir())[3:] == [
        "03-REVIEW.md", "04-COMMIT.md"]
    assert tree.config("plain")["no_progress"] is None

    bad = tree.cli("node", "init", "bad", "--check-timeout", "10", "--no-progress", "0",
                   check=False)
    assert bad.returncode == 1
    assert 'check_timeout: "10" needs a unit' in bad.stderr
    assert "no_progress: must be a whole number >= 1" in bad.stderr


def test_a_resumed_run_keeps_its_diagnostics_and_its_streak(tree: Tree) -> None:
    """Pause while iteration 2 runs, resume: the new supervisor rebuilds the last check
    result (for the prompt) and the no-progress streak from the check rows."""
    capture = tree.repo.parent / "cap-resume"
    release = tree.repo.parent / "release"
    release.mkdir()
    step = (f"[stub:capture={capture}] [stub:hang-unless={release}/$ITER_REF]\n"
            "Check: $CHECK_STATUS ($CHECK_SIGNATURE)\n")
    tree.node("resumer", {"01-WORK.md": step}, "--no-sync", "--max-iters", "5",
              "--exit-check", "echo 'ERROR: still broken'; exit 1")
    tree.cli("node", "start", "resumer")
    run_id = wait_until(lambda: tree.sql("SELECT run_id FROM runs"), timeout=30,
                        message="the run row")[0][0]
    (release / f"{run_id}.1").touch()
    wait_until(lambda: (capture / "call-2.json").exists(), timeout=30,
               message="iteration 2 running")
    tree.cli("node", "pause", "resumer")
    assert tree.wait_settled_or("resumer", {"paused"}) == "paused"
    (release / f"{run_id}.2").touch()
    tree.cli("node", "resume", "resumer")
    assert tree.wait_settled("resumer") == "exited"

    assert tree.sql("SELECT metadata FROM runs") == [("no progress: ERROR: still broken",)]
    assert tree.sql("SELECT COUNT(*) FROM iterations") == [(2,)]
    prompts = [json.loads((capture / f"call-{n}.json").read_text())["prompt"]
               for n in (1, 2, 3)]
    assert "Check: none ()" in prompts[0]
    assert "Check: fail (ERROR: still broken)" in prompts[1]
    assert "Check: fail (ERROR: still broken)" in prompts[2]  # after the resume
