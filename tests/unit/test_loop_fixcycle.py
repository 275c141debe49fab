"""The bounded check-and-fix cycle, in-process: a red gate with ``on_fail: fix`` runs its
fixer prompt and the check again, round after round, until it passes or the rounds are
spent; every round books its own rows, and the fixer sees the red check typed. Gate
commands are real processes; the fixer is the scripted agent."""

from __future__ import annotations

from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]

# Red until fixed.txt holds two lines: each fix round adds one.
LINT = ("n=$(cat fixed.txt 2>/dev/null | wc -l); echo \"lint: $n of 2 fixed\"; "
        "[ \"$n\" -ge 2 ] || { echo 'FAILED lint.py::test_style - E501'; "
        "echo '1 failed, 0 passed'; exit 1; }")
FIXER = ("[stub:append=fixed.txt:one more]\n"
         "Fix: $CHECK_COMMAND | exit $CHECK_EXIT_CODE | ids $CHECK_FAILING_IDS | "
         "sig $CHECK_SIGNATURE | log $CHECK_OUTPUT_FILE\n<<<\n$CHECK_OUTPUT\n>>>\n")


def _gate(check: str, *extra: str) -> str:
    lines = [f"check: {check}", "on_fail: fix", "fix: fixers/LINT.md", *extra]
    return "---\n" + "\n".join(lines) + "\n---\nLint gate.\n"


def _steps(t: LoopTree, name: str) -> list[tuple[object, ...]]:
    return t.sql("SELECT step, step_name, status, exit_code, metadata FROM steps "
                 "WHERE node = ? ORDER BY step_id", f"main.{name}")


def test_a_fixer_repairs_the_gate_in_round_2(loop_tree: LoopTree) -> None:
    t = loop_tree
    ndir = t.node("linted", {"01-LINT.md": _gate(LINT), "02-WORK.md": "Work.\n"},
                  "--no-sync", "--max-iters", "1")
    (ndir / "fixers").mkdir()
    (ndir / "fixers" / "LINT.md").write_text(FIXER)
    t.run("linted")
    assert t.status("linted") == "completed"
    assert _steps(t, "linted") == [
        (1, "LINT", "failed", 1, "check failed (exit 1)"),
        (1, "LINT fix round 1 of 3", "completed", 0, ""),
        (1, "LINT", "failed", 1, "check failed (exit 1) after fix round 1 of 3"),
        (1, "LINT fix round 2 of 3", "completed", 0, ""),
        (1, "LINT", "completed", 0, "passed after fix round 2 of 3"),
        (2, "WORK", "completed", 0, ""),
    ]
    checks = t.sql("SELECT exit_code, signature, output_path FROM checks ORDER BY check_id")
    assert [c[:2] for c in checks] == [(1, "lint.py::test_style"), (1, "lint.py::test_style"),
                                       (0, "")]
    (run_id,), = t.sql("SELECT run_id FROM runs")
    assert [c[2] for c in checks] == [
        str(ndir / "tmp" / "checks" / f"{run_id}-1-1{suffix}.log")
        for suffix in ("", "-fix1", "-fix2")]
    first, second, work = (c.prompt for c in t.launcher.calls)
    assert (f"Fix: {LINT} | exit 1 | ids lint.py::test_style | sig lint.py::test_style | "
            f"log {checks[0][2]}") in first
    assert "<<<\nlint: 0 of 2 fixed\nFAILED lint.py::test_style - E501" in first
    assert "lint: 1 of 2 fixed" in second and f"log {checks[1][2]}" in second
    assert "Work." in work


def test_a_gate_never_repaired_ends_after_3_rounds(loop_tree: LoopTree) -> None:
    t = loop_tree
    never = "echo 'FAILED lint.py::test_style - E501'; echo '1 failed'; exit 1"
    ndir = t.node("broken", {"01-LINT.md": _gate(never), "02-OTHER.md": _gate("true"),
                             "03-WORK.md": "never runs\n"}, "--no-sync", "--max-iters", "1")
    (ndir / "fixers").mkdir()
    (ndir / "fixers" / "LINT.md").write_text(FIXER)
    t.run("broken")
    assert t.status("broken") == "exited"
    reason = "check failed (exit 1) after 3 fix rounds"
    assert _steps(t, "broken") == [
        (1, "LINT", "failed", 1, "check failed (exit 1)"),
        (1, "LINT fix round 1 of 3", "completed", 0, ""),
        (1, "LINT", "failed", 1, "check failed (exit 1) after fix round 1 of 3"),
        (1, "LINT fix round 2 of 3", "completed", 0, ""),
        (1, "LINT", "failed", 1, "check failed (exit 1) after fix round 2 of 3"),
        (1, "LINT fix round 3 of 3", "completed", 0, ""),
        (1, "LINT", "failed", 1, "check failed (exit 1) after fix round 3 of 3"),
        (2, "OTHER", "stopped", 0, "failed on LINT"),
        (3, "WORK", "stopped", 0, "failed on LINT"),
    ]
    assert t.sql("SELECT status, metadata FROM iterations") == [
        ("failed", f"failed on LINT: {reason}")]
    assert t.sql("SELECT COUNT(*) FROM checks") == [(4,)]
    assert len(t.launcher.calls) == 3


def test_on_fail_final_continue_and_ordered_gates(loop_tree: LoopTree) -> None:
    """Two gates in file order: the first stays red after its one round but continues;
    the second (plain stop-iteration) is the first unrecoverable one and ends the
    iteration before the work step."""
    t = loop_tree
    never = "echo 'ERROR: style'; exit 1"
    steps = {"01-LINT.md": _gate(never, "max_fix_rounds: 1", "on_fail_final: continue"),
             "02-TYPES.md": "---\ncheck: echo 'ERROR: types'; exit 2\n"
                            "on_fail: stop-iteration\n---\n",
             "03-WORK.md": "never runs\n"}
    ndir = t.node("ordered", steps, "--no-sync", "--max-iters", "1")
    (ndir / "fixers").mkdir()
    (ndir / "fixers" / "LINT.md").write_text("[stub:append=x.txt:y]\nFix $CHECK_SIGNATURE\n")
    t.run("ordered")
    assert _steps(t, "ordered") == [
        (1, "LINT", "failed", 1, "check failed (exit 1)"),
        (1, "LINT fix round 1 of 1", "completed", 0, ""),
        (1, "LINT", "failed", 1, "check failed (exit 1) after fix round 1 of 1"),
        (2, "TYPES", "failed", 2, "check failed (exit 2)"),
        (3, "WORK", "stopped", 0, "failed on TYPES"),
    ]
    assert t.sql("SELECT metadata FROM iterations") == [
        ("failed on TYPES: check failed (exit 2)",)]


def test_a_missing_fixer_fails_the_gate_without_a_round(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("nofix", {"01-LINT.md": _gate("exit 1"), "02-WORK.md": "never runs\n"},
           "--no-sync", "--max-iters", "1")
    t.run("nofix")
    assert [s[1:] for s in _steps(t, "nofix")] == [
        ("LINT", "failed", 1, "check failed (exit 1)"), ("WORK", "stopped", 0, "failed on LINT")]
    assert t.launcher.calls == []
    assert "fixer fixers/LINT.md cannot be read" in t.pane()


def test_a_fix_round_whose_usage_window_ends_the_run_ends_the_cycle(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    ndir = t.node("limited", {"01-LINT.md": _gate("exit 1"), "02-WORK.md": "Work.\n"},
                  "--no-sync", "--max-iters", "2")
    t.set_config("limited", on_usage_limit="stop")
    (ndir / "fixers").mkdir()
    (ndir / "fixers" / "LINT.md").write_text("[stub:limit-first=1]\nFix it.\n")
    t.run("limited")
    status, code, reason = t.run_row("limited")
    assert (status, code) == ("stopped", 0) and reason.startswith("usage limit (five_hour)")
    assert t.status("limited") == "stopped"
    assert _steps(t, "limited") == [  # no re-check, no WORK: the run ended in round 1
        (1, "LINT", "failed", 1, "check failed (exit 1)"),
        (1, "LINT fix round 1 of 3", "stopped", 0, reason),
    ]
    assert t.iterations("limited") == [(1, "stopped", 0, reason)]
