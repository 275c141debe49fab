"""``fractal node done`` in-process: a node's own word ends its run ``completed`` after the
step it was said in, with its reason; from outside the node it is refused."""

from __future__ import annotations

from tests.helpers import git
from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


def test_done_ends_the_run_completed_after_the_current_step(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "[stub:write=a.txt:a]", "02-B.md": "[stub:write=b.txt:b]"}
    t.node("lead", steps, "--no-sync", "--max-iters", "5")
    said: list[str] = []

    def done() -> None:
        out = t.cli("node", "done", "--reason", "all merged", cwd=t.worktree("lead"))
        said.append(out.output)
        said.append(t.cli("node", "status", "lead").output)
    t.during("(A)", done)
    assert t.run("lead") == 0
    assert "main.lead is done" in said[0]
    assert "ending" in said[1]
    assert t.status("lead") == "completed"
    assert t.sql("SELECT status, exit_code, metadata FROM runs") == [
        ("completed", 0, "Done: all merged")]
    assert t.sql("SELECT step_name, status FROM steps") == [("A", "completed")]  # B never ran
    assert t.sql("SELECT status FROM iterations") == [("completed",)]
    assert git(t.repo, "show", "main.lead:a.txt") == "a"  # the backstop kept A's work
    assert t.sql("SELECT actor, status FROM events WHERE event = 'done'") == [
        ("main.lead", "completed")]


def test_done_in_the_last_step_ends_the_run_at_the_iteration_boundary(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("solo", {"01-A.md": "a"}, "--no-sync", "--max-iters", "4")
    t.during("(A)", lambda: t.cli("node", "done", cwd=t.worktree("solo")))
    t.run("solo")
    assert t.sql("SELECT status, exit_code, metadata FROM runs") == [("completed", 0, "Done")]
    assert t.sql("SELECT COUNT(*) FROM iterations") == [(1,)]  # not the 4 of --max-iters


def test_done_from_outside_the_node_is_refused_and_names_finish(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("other", {"01-A.md": "a"}, "--no-sync", "--max-iters", "2")
    refused: list[str] = []
    t.during("(A)", lambda: refused.append(t.cli("node", "done", check=False).output))
    t.run("other")
    assert "outside any node" in refused[0] and "fractal node finish NODE" in refused[0]
    assert t.sql("SELECT metadata FROM runs") == [("Reached max iterations (2)",)]
    assert t.sql("SELECT node, status FROM events WHERE event = 'done'") == [("main", "failed")]


def test_done_without_an_open_run_is_refused(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("idle")
    out = t.cli("node", "done", check=False, cwd=t.worktree("idle"))
    assert out.exit_code == 1
    assert "idle" in out.output and "has none" in out.output


def test_done_during_a_children_wait_ends_the_wait_at_once(loop_tree: LoopTree) -> None:
    """``node done`` said while the loop waits for a child (at its gate, running) does not
    wait for it: the wait ends at the done (not at the child's end or the walls), the run
    ends completed with the done's reason, its end notice names the child left running,
    and until then status says both that the run is ending and what it waits for."""
    t = loop_tree
    t.node("lead", {"01-A.md": "[stub:write=a.txt:a]",
                    "02-MERGE.md": "---\nwait: children\n---\n[stub:write=m.txt:m]"},
           "--no-sync", "--max-iters", "3", "--wait", "10m")
    t.cli("node", "init", "c", "--parent", "lead")
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.lead.c'")
    said: list[str] = []

    def done() -> None:
        said.append(t.cli("node", "done", "--reason", "c is the operator's now",
                          cwd=t.worktree("lead")).output)
        said.append(t.cli("node", "status", "lead").output)
    t.clock.after(50, done)
    assert t.run("lead") == 0
    assert "main.lead is done" in said[0]
    assert "ending; run 1, waiting for 1 child: c active" in said[1]
    assert t.clock.elapsed() < 60  # at the done, not at the 10m window or the child's end
    assert t.run_row("lead") == ("completed", 0, "Done: c is the operator's now")
    assert [s[:4] for s in t.steps("lead")] == [
        ("A", "completed", 0, ""), ("WAIT", "stopped", 0, "done while waiting for children")]
    assert t.iterations("lead") == [
        (1, "completed", 0, "done while waiting for children before MERGE")]
    assert t.status("lead.c") == "active"  # the child is not the done's to end
    assert ("ended with 1 child still running: main.lead.c active",) in t.sql(
        "SELECT subject FROM messages WHERE node = 'main.lead' AND channel = 'outbox'")
