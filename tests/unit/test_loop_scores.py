"""Scored checks in the loop, in-process: an exit check reports a score each iteration;
below ``pass_score`` it is red even at exit 0, a stalled score ends the run on
stagnation, a climbing one completes it, and a capped run names its distance to the
threshold. The check commands are real processes; the agent is scripted."""

from __future__ import annotations

import json

from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


def _scored_check(*scores: float) -> str:
    """An exit check that prints the ITER-th of ``scores`` as its last line, exit 0."""
    table = " ".join(str(s) for s in scores)
    return f"s=({table}); echo 'checked'; echo \"score: ${{s[$((ITER-1))]}}\""


def _node(t: LoopTree, name: str, check: str, max_iters: int, **config: object) -> None:
    t.node(name, {"01-WORK.md": "Improve it. Last: $CHECK_STATUS $CHECK_SCORE\n"},
           "--no-sync", "--max-iters", str(max_iters), "--exit-check", check)
    t.set_config(name, **config)


def _scores(t: LoopTree, name: str) -> list[tuple[object, ...]]:
    return t.sql("SELECT i.iter, c.exit_code, c.score, c.signature FROM checks c JOIN "
                 "iterations i ON i.iter_id = c.iter_id WHERE c.node = ? ORDER BY c.check_id",
                 f"main.{name}")


def test_a_stalled_score_ends_the_run_on_stagnation(loop_tree: LoopTree) -> None:
    """0.5, 0.7 (progress), 0.71 (stalled once), 0.715 (twice): exited at iteration 4."""
    t = loop_tree
    _node(t, "climber", _scored_check(0.5, 0.7, 0.71, 0.715, 0.9), 8, pass_score=0.8)
    t.run("climber")
    assert t.status("climber") == "exited"
    reason = "stagnation: score 0.71 -> 0.715"
    assert t.sql("SELECT status, exit_code, metadata FROM runs") == [("exited", 1, reason)]
    assert _scores(t, "climber") == [
        (1, 0, 0.5, "score 0.5 below pass_score 0.8"),
        (2, 0, 0.7, "score 0.7 below pass_score 0.8"),
        (3, 0, 0.71, "score 0.71 below pass_score 0.8"),
        (4, 0, 0.715, "score 0.715 below pass_score 0.8"),
    ]
    assert t.sql("SELECT subject FROM messages WHERE node = 'main.climber'") == [
        (f"run exited: {reason}",)]
    prompts = [c.prompt for c in t.launcher.calls]
    assert "Last: none " in prompts[0] and "Last: fail 0.71" in prompts[3]
    report = json.loads(t.cli("node", "checks", "climber", "--json").stdout)
    assert [p["score"] for p in report["trend"]] == [0.5, 0.7, 0.71, 0.715]
    assert {c["status"] for c in report["checks"]} == {"failed"}
    activity = json.loads(t.cli("node", "activity", "climber", "--json").stdout)
    assert {r["status"] for r in activity if r["kind"] == "check"} == {"failed"}


def test_a_score_that_reaches_the_threshold_completes(loop_tree: LoopTree) -> None:
    t = loop_tree
    check = _scored_check(0.5, 0.7, 0.8)
    _node(t, "reacher", check, 8, pass_score=0.8)
    t.run("reacher")
    assert t.status("reacher") == "completed"
    assert t.sql("SELECT status, metadata FROM runs") == [
        ("completed", f"exit check passed ({check})")]
    assert [row[2] for row in _scores(t, "reacher")] == [0.5, 0.7, 0.8]
    table = t.cli("node", "checks", "reacher", "--csv").stdout.splitlines()
    assert table[0].startswith("ref,kind,step,status,exit,failures,passed,score")
    assert table[-1].split(",")[3] == "passed"


def test_stagnation_off_lets_the_cap_name_the_distance(loop_tree: LoopTree) -> None:
    """With ``stagnation`` null the run reaches its cap; the newest check is current, so
    the reason and the notice say how far the score was from the threshold."""
    t = loop_tree
    _node(t, "capped", _scored_check(0.7, 0.71, 0.72), 3, pass_score=0.8, stagnation=None)
    t.run("capped")
    reason = "Reached max iterations (3); final iteration failed; score 0.72 of 0.8 needed"
    assert t.sql("SELECT status, metadata FROM runs") == [("exited", reason)]
    assert t.sql("SELECT subject FROM messages WHERE node = 'main.capped'") == [
        (f"run exited: {reason}",)]


def test_without_pass_score_the_exit_code_decides(loop_tree: LoopTree) -> None:
    """A score with no threshold is recorded, but exit 0 passes the check."""
    t = loop_tree
    _node(t, "plain", _scored_check(0.3), 4)
    t.run("plain")
    assert t.status("plain") == "completed"
    assert _scores(t, "plain") == [(1, 0, 0.3, "")]


def test_a_resumed_run_keeps_its_stagnation_count(loop_tree: LoopTree) -> None:
    """Pause during iteration 4 (after 0.71 stalled once), resume: the new supervisor
    rebuilds the track from the check rows and 0.715 is the second stall."""
    t = loop_tree
    _node(t, "resumer", _scored_check(0.5, 0.7, 0.71, 0.715, 0.9), 8, pass_score=0.8)
    (t.node_dir("resumer") / "steps" / "01-WORK.md").write_text(
        "[stub:sleep=30]\nImprove it.\n")

    def pause_in_iteration_4(call: object) -> None:
        if len(t.launcher.calls) == 4:
            t.clock.after(5, lambda: t.cli("node", "pause", "resumer"))
    t.launcher.on_spawn.append(pause_in_iteration_4)
    t.run("resumer")
    assert t.status("resumer") == "paused"
    t.run("resumer", resume=True)
    assert t.sql("SELECT status, metadata FROM runs") == [
        ("exited", "stagnation: score 0.71 -> 0.715")]
    assert t.sql("SELECT COUNT(*) FROM iterations") == [(4,)]


def test_a_stale_score_is_not_reported(loop_tree: LoopTree) -> None:
    """A scored gate early in the iteration, then a step that commits: at the cap the
    newest check is older than the last commit, so the reason names no distance."""
    t = loop_tree
    gate = "---\ncheck: echo 'score: 0.6'\npass_score: 0.8\n---\n"
    t.node("stale", {"01-SCORE.md": gate, "02-WORK.md": "[stub:append=work.txt:more]\n"},
           "--no-sync", "--max-iters", "1")
    t.run("stale")
    assert t.sql("SELECT step_name, status, metadata FROM steps ORDER BY step_id") == [
        ("SCORE", "failed", "check failed (score 0.6 below pass_score 0.8)"),
        ("WORK", "completed", "")]
    assert t.sql("SELECT metadata FROM runs") == [("Reached max iterations (1)",)]
    assert t.sql("SELECT score, signature FROM checks") == [
        (0.6, "score 0.6 below pass_score 0.8")]


def test_a_current_red_gate_score_is_reported_at_the_cap(loop_tree: LoopTree) -> None:
    t = loop_tree
    gate = ("---\ncheck: echo 'score: 0.6'\npass_score: 0.8\non_fail: stop-iteration\n---\n")
    t.node("current", {"01-SCORE.md": gate, "02-WORK.md": "never runs\n"},
           "--no-sync", "--max-iters", "1")
    t.run("current")
    assert t.sql("SELECT metadata FROM runs") == [
        ("Reached max iterations (1); final iteration failed; score 0.6 of 0.8 needed",)]
