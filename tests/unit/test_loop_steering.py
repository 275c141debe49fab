"""Steering a running loop in-process: stop, finish, pause and resume, approval gates and
SYNC, with the real verbs (the CLI in this process) acting while a step runs or a gate
waits on the fake clock. Moved down from tests/e2e/test_steering.py, same assertions."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from fractal.assets import mode_text
from tests.helpers import git
from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


def _during(t: LoopTree, label: str, action: Callable[[], None]) -> None:
    """Run ``action`` once, when the step whose STEP_LABEL contains ``label`` starts."""
    t.during(label, action)


def test_stop_ends_the_run_after_the_current_step(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "[stub:write=a.txt:a]", "02-B.md": "[stub:write=b.txt:b]"}
    t.node("stopper", steps, "--no-sync", "--max-iters", "5")
    seen: list[str] = []

    def stop() -> None:
        t.cli("node", "stop", "stopper", "--reason", "enough")
        seen.append(t.status("stopper"))
        seen.append(t.cli("node", "status", "stopper").output)
    _during(t, "(A)", stop)
    t.run("stopper")
    assert seen[0] == "active"
    assert "stopping" in seen[1]
    assert t.status("stopper") == "stopped"
    assert t.sql("SELECT status, exit_code, metadata FROM runs") == [
        ("stopped", 0, "Stopped by request")]
    assert t.sql("SELECT step_name, status FROM steps") == [("A", "completed")]
    assert t.sql("SELECT status FROM iterations") == [("stopped",)]
    assert git(t.repo, "show", "main.stopper:a.txt") == "a"


def test_finish_ends_the_run_after_the_current_iteration(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("finisher", {"01-A.md": "a", "02-B.md": "[stub:write=b.txt:b]"}, "--no-sync",
           "--max-iters", "5")
    _during(t, "(A)", lambda: t.cli("node", "finish", "finisher"))
    t.run("finisher")
    assert t.status("finisher") == "completed"
    assert t.sql("SELECT status, exit_code, metadata FROM runs") == [
        ("completed", 0, "Finished by request")]
    assert t.sql("SELECT step_name, status FROM steps ORDER BY step_id") == [
        ("A", "completed"), ("B", "completed")]
    assert t.sql("SELECT COUNT(*) FROM iterations") == [(1,)]


def test_finish_cancel_withdraws_it(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("undo", {"01-A.md": "a"}, "--no-sync", "--max-iters", "2")
    _during(t, "(A)", lambda: (t.cli("node", "finish", "undo"),
                               t.cli("node", "finish", "undo", "--cancel")))
    t.run("undo")
    assert t.status("undo") == "completed"
    assert t.sql("SELECT metadata FROM runs") == [("Reached max iterations (2)",)]


def test_pause_parks_and_resume_adopts_the_run_with_its_parked_time_credited(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    go = t.repo.parent / "go-on"
    steps = {"01-A.md": f"[stub:write=wip.txt:draft] [stub:hang-unless={go}]",
             "02-B.md": "b"}
    t.node("parker", steps, "--no-sync", "--max-iters", "1", "--timeout", "10m")
    head = git(t.repo, "rev-parse", "main.parker")
    _during(t, "(A)", lambda: t.clock.after(3, lambda: t.cli("node", "pause", "parker")))
    assert t.run("parker") == 0
    assert t.sql("SELECT status FROM steps WHERE step_name = 'A'") == [("paused",)]
    assert t.status("parker") == "paused"
    assert t.sql("SELECT COUNT(*) FROM runs WHERE ended_at IS NULL") == [(1,)]
    assert t.sql("SELECT COUNT(*) FROM iterations WHERE ended_at IS NULL") == [(1,)]
    assert git(t.repo, "rev-parse", "main.parker") == head  # nothing committed
    assert (t.worktree("parker") / "wip.txt").read_text() == "draft\n"
    assert t.cli("node", "status", "parker").output.startswith("paused")
    assert t.launcher.calls[0].stopped  # the pause ended the agent's group
    go.touch()
    t.run("parker", resume=True, parked_for=120)
    assert t.status("parker") == "completed"
    runs = t.sql("SELECT run_id, status, metadata FROM runs")
    assert [r[1:] for r in runs] == [("completed", "Reached max iterations (1)")]
    assert t.sql("SELECT iter FROM iterations") == [(1,)]
    assert t.sql("SELECT step_name, status FROM steps ORDER BY step_id") == [
        ("A", "paused"), ("A", "completed"), ("B", "completed")]
    first, second, _third = t.launcher.calls
    resume_text = mode_text("RESUME").strip().splitlines()[0]
    assert resume_text not in first.prompt and resume_text in second.prompt
    (paused_session,), = t.sql("SELECT session FROM steps WHERE status = 'paused'")
    assert first.env["FRACTAL_SESSION_ID"] == ""  # the first launch opened the session
    assert second.env["FRACTAL_SESSION_ID"] == paused_session != ""  # the resume continues
    assert second.env["RUN_ID"] == first.env["RUN_ID"]
    credit = int(second.env["RUN_END_EPOCH"]) - int(first.env["RUN_END_EPOCH"])
    assert credit >= 110, "the parked span is credited back to the run wall"
    assert git(t.repo, "show", "main.parker:wip.txt") == "draft"


def _start_at_gate(t: LoopTree, name: str, action: Callable[[], None],
                   after: float = 5.0) -> None:
    """Node ``name`` (gated step A, then B; up to 3 iterations) with ``action`` run
    ``after`` seconds into A's approval wait."""
    steps = {"01-A.md": "---\nrequires_approval: true\n---\nwork",
             "02-B.md": "[stub:write=b.txt:b]"}
    t.node(name, steps, "--no-sync", "--max-iters", "3")
    _during(t, "(A)", lambda: t.clock.after(after, action))


def test_approval_gate_waits_for_the_parent(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]",
             "02-B.md": "[stub:write=b.txt:b]"}
    t.node("gated", steps, "--no-sync", "--max-iters", "1")
    t.node("other", {"01-A.md": "x"})
    seen: dict[str, object] = {}

    def at_the_gate() -> None:
        rows = json.loads(t.cli("node", "pending", "--json").output)
        seen["pending"] = [(r["branch"], r["step_name"]) for r in rows]
        seen["status"] = t.cli("node", "status", "gated").output
        refused = t.cli("node", "approve", "gated", cwd=t.worktree("other"), check=False)
        seen["refused"] = (refused.exit_code, "only main" in refused.output)
        t.cli("node", "approve", "gated")
    _during(t, "(A)", lambda: t.clock.after(30, at_the_gate))
    t.run("gated")
    assert seen["pending"] == [("main.gated", "A")]
    assert "A awaiting approval" in str(seen["status"])
    assert seen["refused"] == (1, True)
    assert t.status("gated") == "completed"
    (status, approved), = t.sql("SELECT status, approved FROM steps WHERE step_name = 'A'")
    assert status == "completed" and approved
    assert t.sql("SELECT status FROM steps WHERE step_name = 'B'") == [("completed",)]
    again = t.cli("node", "approve", "gated", check=False)
    assert again.exit_code == 1


@pytest.mark.parametrize(("verb", "node_status", "run_reason", "step_reason"), [
    ("stop", "stopped", "Stopped by request", "stopped awaiting approval"),
    ("finish", "completed", "Finished by request", "finish requested awaiting approval"),
])
def test_stop_or_finish_ends_an_approval_wait(loop_tree: LoopTree, verb: str,
                                              node_status: str, run_reason: str,
                                              step_reason: str) -> None:
    """Both end the wait and skip the rest of the iteration; a finish still ends the run
    the way a finish does (completed), a stop the way a stop does."""
    t = loop_tree
    _start_at_gate(t, "held", lambda: t.cli("node", verb, "held"))
    t.run("held")
    assert t.status("held") == node_status
    # A finish over a gate nobody approved says so on the run (not on the iteration).
    ended = f"{run_reason}; A never approved" if verb == "finish" else run_reason
    assert t.sql("SELECT status, exit_code, metadata FROM runs") == [
        (node_status, 0, ended)]
    assert t.sql("SELECT status, metadata FROM iterations") == [("stopped", run_reason)]
    assert t.sql("SELECT step_name, status, metadata FROM steps") == [
        ("A", "stopped", step_reason)]


def test_a_finish_taken_by_an_approval_wait_cannot_be_cancelled_half_way(
        loop_tree: LoopTree) -> None:
    """The finish ends the wait at once; the run then drains a running child, and a
    ``--cancel`` that arrives during that drain is too late."""
    t = loop_tree
    _start_at_gate(t, "fin", lambda: t.cli("node", "finish", "fin"))
    t.cli("node", "init", "c", "--parent", "fin")
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.fin.c'")
    taken: list[object] = []

    def cancel_late() -> None:
        taken.extend(t.sql("SELECT 1 FROM steps WHERE metadata = "
                           "'finish requested awaiting approval'"))
        t.cli("node", "finish", "fin", "--cancel", check=False)  # too late either way
    t.clock.after(8, cancel_late)
    t.clock.after(12, lambda: t.sql_write("UPDATE nodes SET status = 'completed' "
                                          "WHERE node = 'main.fin.c'"))
    t.run("fin")
    assert taken
    assert t.status("fin") == "completed"
    assert t.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.fin'") == [(1,)]
    assert t.sql("SELECT metadata FROM runs WHERE node = 'main.fin'") == [
        ("Finished by request; A never approved",)]


def test_approval_wait_burns_the_clock(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "---\nrequires_approval: true\n---\nwork"}
    t.node("late", steps, "--no-sync", "--max-iters", "1", "--iter-timeout", "2s")
    t.run("late")
    assert t.status("late") == "exited"
    (status, code, meta), = t.sql("SELECT status, exit_code, metadata FROM steps")
    assert (status, code, meta) == ("exited", 124, "timed out awaiting approval")
    assert t.sql("SELECT metadata FROM iterations")[0][0].startswith("A timed out")
    assert 2.0 <= t.clock.elapsed() < 10.0  # the wait ended at the iteration wall


def test_a_gate_of_the_runs_start_holds_after_its_line_is_deleted_and_a_resume(
        loop_tree: LoopTree) -> None:
    """The node deletes ``requires_approval`` from B's file during A and is paused there;
    the resumed run still holds B as a gate (its ``gates`` event), and B waits for the
    parent's approval."""
    t = loop_tree
    go = t.repo.parent / "go-on"
    steps = {"01-A.md": f"[stub:hang-unless={go}]",
             "02-B.md": "---\nrequires_approval: true\n---\n[stub:write=b.txt:b]"}
    t.node("kept", steps, "--no-sync", "--max-iters", "1")
    gated = t.node_dir("kept") / "steps" / "02-B.md"

    def drop_the_gate_and_pause() -> None:
        gated.write_text("[stub:write=b.txt:b]")
        t.clock.after(3, lambda: t.cli("node", "pause", "kept"))
    _during(t, "(A)", drop_the_gate_and_pause)
    t.run("kept")
    assert t.status("kept") == "paused"
    assert t.sql("SELECT metadata FROM events WHERE event = 'gates'") == [("B",)]
    go.touch()
    _during(t, "(B)", lambda: t.clock.after(30, lambda: t.cli("node", "approve", "kept")))
    t.run("kept", resume=True)
    assert t.status("kept") == "completed"
    (status, approved), = t.sql("SELECT status, approved FROM steps WHERE step_name = 'B'")
    assert status == "completed" and approved


def test_pause_while_awaiting_approval_then_approve_while_parked(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]",
             "02-B.md": "[stub:write=b.txt:b]"}
    t.node("pg", steps, "--no-sync", "--max-iters", "1")
    _during(t, "(A)", lambda: t.clock.after(5, lambda: t.cli("node", "pause", "pg")))
    t.run("pg")
    assert t.status("pg") == "paused"
    assert t.sql("SELECT status, metadata FROM steps") == [("paused", "awaiting approval")]
    assert json.loads(t.cli("node", "pending", "--json").output)  # still listed
    t.cli("node", "approve", "pg")
    t.run("pg", resume=True)
    assert t.status("pg") == "completed"
    assert t.sql("SELECT step_name, status FROM steps ORDER BY step_id") == [
        ("A", "paused"), ("B", "completed")]


def test_a_resume_re_arms_the_gate_and_pending_lists_it_once(loop_tree: LoopTree) -> None:
    """Paused while A awaited approval and resumed unapproved: the resume waits at a
    fresh gated row; the parked one is voided, so ``node pending`` lists A once (the
    new row) and the approval releases it."""
    t = loop_tree
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]",
             "02-B.md": "[stub:write=b.txt:b]"}
    t.node("pg", steps, "--no-sync", "--max-iters", "1")
    _during(t, "(A)", lambda: t.clock.after(5, lambda: t.cli("node", "pause", "pg")))
    t.run("pg")
    assert t.status("pg") == "paused"
    listed: list[list[dict[str, object]]] = []

    def look_then_approve() -> None:
        listed.append(json.loads(t.cli("node", "pending", "--json").output))
        t.cli("node", "approve", "pg")
    t.clock.after(30, look_then_approve)
    t.run("pg", resume=True)
    assert t.status("pg") == "completed"
    rows = t.sql("SELECT step_id, status, approved FROM steps WHERE step_name = 'A' "
                 "ORDER BY step_id")
    assert rows[0][1:] == ("paused", None)  # the parked row, voided
    assert rows[1][1] == "completed" and rows[1][2]
    (pending,), = listed
    assert pending["step_id"] == rows[1][0], pending


def test_sync_rows_failures_and_timeouts(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "[stub:write=a.txt:a]", "02-B.md": "[stub:write=b.txt:b]"}
    t.node("syncer", steps, "--max-iters", "1", node_md="# Task\n\n[stub:sync-fail=4]\n")
    t.run("syncer")
    assert t.status("syncer") == "completed"
    rows = t.sql("SELECT step, step_name, status, exit_code FROM steps WHERE node = "
                 "'main.syncer' ORDER BY step_id")
    assert rows == [(1, "SYNC", "failed", 4), (1, "A", "completed", 0),
                    (2, "SYNC", "failed", 4), (2, "B", "completed", 0)]
    t.node("slowsync", steps, "--max-iters", "1", "--step-timeout", "1s",
           node_md="# Task\n\n[stub:sync-sleep=30]\n")
    t.run("slowsync")
    assert t.status("slowsync") == "exited"
    it = t.sql("SELECT status, metadata FROM iterations WHERE node = 'main.slowsync'")
    assert it == [("failed", "SYNC timed out (1s)")]
    assert t.sql("SELECT step_name, status, metadata FROM steps WHERE node = "
                 "'main.slowsync' ORDER BY step_id")[1:] == [
        ("A", "stopped", "failed on SYNC"), ("B", "stopped", "failed on SYNC")]
