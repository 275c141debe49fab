"""A completed run's end books the work of the node's subtree that never reached it (an
``unmerged`` event of the run), in-process on the fake clock; the inbox reads that fact,
so a top-level lead with a child's work left out is not announced ready to merge."""

from __future__ import annotations

import json

from tests.helpers import git
from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


def _lead_with_a_child(t: LoopTree) -> None:
    """A lead of one iteration and a settled child ``kid`` holding a commit of its own."""
    t.node("lead", {"01-A.md": "[stub:write=a.txt:a]"}, "--max-iters", "1")
    t.cli("node", "init", "kid", "--parent", "lead")
    wt = t.worktree("lead.kid")
    (wt / "kid.txt").write_text("kid\n")
    git(wt, "add", "kid.txt")
    git(wt, "commit", "-q", "-m", "kid's work", "--no-verify")
    t.sql_write("UPDATE nodes SET status = 'completed' WHERE node = 'main.lead.kid'")


def test_a_child_never_merged_is_booked_and_the_lead_is_not_ready(loop_tree: LoopTree) -> None:
    t = loop_tree
    _lead_with_a_child(t)
    assert t.run("lead") == 0
    assert t.run_row("lead") == ("completed", 0, "Reached max iterations (1)")
    label = "main.lead.kid (completed, its work never merged into main.lead)"
    assert t.sql("SELECT event, run_id, metadata FROM events WHERE event = 'unmerged'") == [
        ("unmerged", 1, label)]
    (item,) = [i for i in json.loads(t.cli("inbox", "--json").stdout) if i["kind"] == "ready"]
    assert item["node"] == "main.lead"
    assert item["command"] == "fractal node merge main.lead --force"
    assert "ready to merge" not in item["summary"] and label in item["summary"]
    refused = t.cli("node", "merge", "lead", check=False)
    assert refused.exit_code == 1 and "main.lead.kid" in refused.output


def test_a_merged_child_books_nothing_and_the_lead_is_ready(loop_tree: LoopTree) -> None:
    t = loop_tree
    _lead_with_a_child(t)
    t.cli("node", "merge", "kid", cwd=t.worktree("lead"))
    assert t.run("lead") == 0
    assert t.sql("SELECT COUNT(*) FROM events WHERE event = 'unmerged'") == [(0,)]
    (item,) = [i for i in json.loads(t.cli("inbox", "--json").stdout) if i["kind"] == "ready"]
    assert item["command"] == "fractal node merge main.lead"
    assert "ready to merge into main" in item["summary"]


def test_merging_the_missing_work_later_makes_the_lead_ready(loop_tree: LoopTree) -> None:
    t = loop_tree
    _lead_with_a_child(t)
    assert t.run("lead") == 0  # books kid's work as missing
    t.cli("node", "merge", "kid", cwd=t.worktree("lead"))  # the operator brings it in later
    assert t.sql("SELECT event, run_id, actor, metadata FROM events WHERE event = 'unmerged' "
                 "ORDER BY event_id") == [
        ("unmerged", 1, "loop", "main.lead.kid (completed, its work never merged into main.lead)"),
        ("unmerged", 1, "merge", "")]
    (item,) = [i for i in json.loads(t.cli("inbox", "--json").stdout) if i["kind"] == "ready"]
    assert item["command"] == "fractal node merge main.lead"
    assert "ready to merge into main" in item["summary"]
    assert t.cli("node", "merge", "lead").exit_code == 0
