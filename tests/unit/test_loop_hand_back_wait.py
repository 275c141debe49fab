"""A hand-back cannot be lost at the run's end, in-process on the fake clock: a run about
to end ``completed`` while a child holds a conflict the node handed back waits for that
child's re-merge (a SYNC once the child settled), and a wall or a stop that ends it first
names the child in the run's reason."""

from __future__ import annotations

import os

from fractal.workspace.handback import HandBack, write_note
from tests.helpers import git
from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]

WHAT = "waiting for the re-merge of main.lead.wordcount"


def _handed_back(t: LoopTree, *opts: str, node_md: str = "# Task\n\nDo the step.\n") -> None:
    """A lead of one iteration whose child ``wordcount`` holds a hand-back note (as
    ``node merge --hand-back`` leaves it) and is running, resolving it."""
    t.node("lead", {"01-A.md": "[stub:write=a.txt:a]"}, "--max-iters", "1", *opts,
           node_md=node_md)
    t.cli("node", "init", "wordcount", "--parent", "lead")
    tip = git(t.repo, "rev-parse", "main.lead").strip()
    write_note(t.node_dir("lead.wordcount"), HandBack("main.lead", tip, ("wc.py",)))
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.lead.wordcount'")


def _resolved(t: LoopTree) -> None:
    """The child resolved the conflict, committed and its run ended."""
    wt = t.worktree("lead.wordcount")
    (wt / "wc.py").write_text("print('resolved')\n")
    git(wt, "add", "wc.py")
    git(wt, "commit", "-q", "-m", "resolve", "--no-verify")
    t.sql_write("UPDATE nodes SET status = 'completed' WHERE node = 'main.lead.wordcount'")


def test_the_run_waits_for_the_re_merge_then_ends_completed(loop_tree: LoopTree) -> None:
    t = loop_tree
    _handed_back(t, "--wait", "1m")
    merged: list[str] = []

    def agent(call: FakeCall) -> None:  # the lead's agent merges as its digest says
        if call.is_sync and WHAT in call.label:
            assert "  - wordcount (completed): once it settled, merge it again" in call.prompt
            os.environ["_NODE"] = call.env["_NODE"]
            try:
                t.cli("node", "merge", "wordcount", cwd=t.worktree("lead"))
            finally:
                del os.environ["_NODE"]
            merged.append(call.label)
    t.launcher.on_spawn.append(agent)
    t.clock.after(1800.0, lambda: _resolved(t))
    assert t.run("lead") == 0
    assert t.run_row("lead") == ("completed", 0, "Reached max iterations (1)")
    assert merged == [f"SYNC while {WHAT}"]  # one SYNC: the quiet windows before cost none
    assert len([c for c in t.launcher.calls if c.is_sync and WHAT in c.label]) == 1
    assert 1800.0 <= t.clock.elapsed() < 1800.0 + 120
    assert "wc.py" in git(t.repo, "ls-tree", "-r", "--name-only", "main.lead")
    assert not (t.node_dir("lead.wordcount") / ".handback").exists()
    assert f"WAIT ({WHAT})" in t.pane()
    rows = t.sql("SELECT iter_id, step, step_name, status FROM steps WHERE node = 'main.lead'")
    assert rows[-1] == (None, 0, "SYNC", "completed"), rows  # the run's: no iteration open


def test_a_child_settling_brings_the_sync_at_once_not_after_the_window(
        loop_tree: LoopTree) -> None:
    """The ``wait`` window is an hour; the child settles at 30 minutes and the SYNC that
    merges it again runs within the next look, not at the hour; the ``node done`` the
    agent runs after that merge gives the run its reason."""
    t = loop_tree
    _handed_back(t, "--wait", "1h")

    def agent(call: FakeCall) -> None:
        if call.is_sync and WHAT in call.label and "(completed)" in call.prompt:
            os.environ["_NODE"] = call.env["_NODE"]
            try:
                t.cli("node", "merge", "wordcount", cwd=t.worktree("lead"))
                t.cli("node", "done", "--reason", "all merged", cwd=t.worktree("lead"))
            finally:
                del os.environ["_NODE"]
    t.launcher.on_spawn.append(agent)
    t.clock.after(1800.0, lambda: _resolved(t))
    assert t.run("lead") == 0
    assert t.run_row("lead") == ("completed", 0, "Done: all merged")  # the SYNC's done
    assert 1800.0 <= t.clock.elapsed() < 1800.0 + 10


def test_the_run_wall_ends_the_wait_naming_the_child(loop_tree: LoopTree) -> None:
    t = loop_tree
    _handed_back(t, "--timeout", "30m")
    assert t.run("lead") == 0
    status, code, reason = t.run_row("lead")
    assert (status, code) == ("exited", 1)
    assert reason.startswith("Timed out at iteration 1.1 (")
    assert reason.endswith("; hand-back of main.lead.wordcount not merged")
    assert 1800.0 <= t.clock.elapsed() < 1800.0 + 10
    assert t.status("lead") == "exited"


def test_a_stop_ends_the_wait_naming_the_child(loop_tree: LoopTree) -> None:
    t = loop_tree
    _handed_back(t)
    t.clock.after(600.0, lambda: t.cli("node", "stop", "lead"))
    assert t.run("lead") == 0
    assert t.run_row("lead") == (
        "stopped", 0, "Stopped by request; hand-back of main.lead.wordcount not merged")


def test_a_pause_parks_the_wait_and_the_resume_waits_again(loop_tree: LoopTree) -> None:
    t = loop_tree
    _handed_back(t, "--timeout", "2h")
    t.clock.after(600.0, lambda: t.cli("node", "pause", "lead"))
    t.run("lead")
    assert t.status("lead") == "paused"
    t.run("lead", resume=True)
    status, _code, reason = t.run_row("lead")
    assert status == "exited" and reason.endswith("hand-back of main.lead.wordcount not merged")
    assert [i[0] for i in t.iterations("lead")] == [1]  # no iteration past max_iters


def test_an_end_that_is_not_completed_does_not_wait(loop_tree: LoopTree) -> None:
    t = loop_tree
    _handed_back(t)
    (t.node_dir("lead") / "steps" / "01-A.md").write_text("[stub:fail=3]")
    assert t.run("lead") == 0
    status, _code, reason = t.run_row("lead")
    assert status == "exited"
    assert reason.endswith("final iteration failed; hand-back of main.lead.wordcount "
                           "not merged")
    assert t.clock.elapsed() < 600


def test_without_a_hand_back_nothing_waits(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("lead", {"01-A.md": "[stub:write=a.txt:a]"}, "--max-iters", "1")
    t.cli("node", "init", "wordcount", "--parent", "lead")
    assert t.run("lead") == 0
    assert t.run_row("lead") == ("completed", 0, "Reached max iterations (1)")
    assert "re-merge" not in t.pane()


def test_a_failed_sync_leaves_the_settled_child_for_the_next_look(loop_tree: LoopTree) -> None:
    """The SYNC the child's settling brings fails (exit 1): the news is not used up, the
    next look runs the SYNC again, and that one merges the hand-back."""
    t = loop_tree
    _handed_back(t, "--wait", "1m", node_md="# Task\n\nMerge. [stub:wait-sync-fail-first=1]\n")
    syncs: list[FakeCall] = []

    def agent(call: FakeCall) -> None:
        if call.is_sync and WHAT in call.label:
            syncs.append(call)
            if len(syncs) == 2:
                os.environ["_NODE"] = call.env["_NODE"]
                try:
                    t.cli("node", "merge", "wordcount", cwd=t.worktree("lead"))
                finally:
                    del os.environ["_NODE"]
    t.launcher.on_spawn.append(agent)
    t.clock.after(630.0, lambda: _resolved(t))  # between two looks
    assert t.run("lead") == 0
    assert [c.returncode for c in syncs] == [1, 0]
    assert "  - wordcount (completed): once it settled, merge it again" in syncs[1].prompt
    assert 55 <= syncs[1].started_at - syncs[0].started_at <= 65  # the next window's look
    assert t.run_row("lead") == ("completed", 0, "Reached max iterations (1)")
