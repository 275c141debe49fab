"""A completed run's end books the work of the node's subtree that never reached it (an
``unmerged`` event of the run), in-process on the fake clock; the inbox reads that fact,
so a top-level lead with a child's work left out is not announced ready to merge."""

from __future__ import annotations

import json
import subprocess

import psutil

from fractal.domain.states import Move
from fractal.store.ledger import Ledger
from fractal.tree import find_tree
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


def _ready_item(t: LoopTree) -> dict[str, object]:
    (item,) = [i for i in json.loads(t.cli("inbox", "--json").stdout) if i["kind"] == "ready"]
    return dict(item)


def _lead_ends_while_its_child_runs(t: LoopTree, kid_steps: dict[str, str]) -> None:
    """A lead of one iteration whose child ``kid`` is active when the lead's run ends (the
    fake loop runs one node at a time, so the kid's run is marked on its row), then the
    kid's own run once the lead has ended."""
    t.node("lead", {"01-A.md": "[stub:write=a.txt:a]"}, "--max-iters", "1")
    t.cli("node", "init", "kid", "--parent", "lead", "--max-iters", "1")
    steps = t.node_dir("lead.kid") / "steps"
    for old in steps.iterdir():
        old.unlink()
    for filename, body in kid_steps.items():
        (steps / filename).write_text(body)
    (t.node_dir("lead.kid") / "scripts" / "setup.sh").unlink(missing_ok=True)
    git(t.worktree("lead.kid"), "add", "-A")
    git(t.worktree("lead.kid"), "commit", "-q", "-m", "test setup", "--no-verify")
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.lead.kid'")
    assert t.run("lead") == 0
    running = "main.lead.kid (active, still running)"
    assert t.sql("SELECT run_id, metadata FROM events WHERE event = 'unmerged'") == [
        (1, running)]
    item = _ready_item(t)
    assert "ready to merge" not in str(item["summary"]) and running in str(item["summary"])
    refused = t.cli("node", "merge", "lead", check=False)
    assert refused.exit_code == 1 and running in refused.output
    t.sql_write("UPDATE nodes SET status = 'idle' WHERE node = 'main.lead.kid'")
    assert t.run("lead.kid") == 0


def test_a_child_still_running_at_the_lead_end_keeps_it_from_ready(loop_tree: LoopTree
                                                                   ) -> None:
    t = loop_tree
    _lead_ends_while_its_child_runs(t, {"01-A.md": "[stub:write=kid.txt:kid]"})
    never = "main.lead.kid (completed, its work never merged into main.lead)"
    assert t.sql("SELECT actor, metadata FROM events WHERE event = 'unmerged' "
                 "ORDER BY event_id") == [
        ("loop", "main.lead.kid (active, still running)"), ("loop", never)]
    assert never in str(_ready_item(t)["summary"])
    t.cli("node", "merge", "kid", cwd=t.worktree("lead"))
    assert _ready_item(t)["command"] == "fractal node merge main.lead"
    assert t.cli("node", "merge", "lead").exit_code == 0


def test_a_child_that_ends_with_nothing_new_makes_the_lead_ready(loop_tree: LoopTree
                                                                 ) -> None:
    t = loop_tree
    _lead_ends_while_its_child_runs(t, {"01-A.md": "nothing to write"})
    assert t.sql("SELECT metadata FROM events WHERE event = 'unmerged' "
                 "ORDER BY event_id DESC LIMIT 1") == [("",)]
    item = _ready_item(t)
    assert item["command"] == "fractal node merge main.lead"
    assert "ready to merge into main" in str(item["summary"])


def test_a_child_killed_after_the_lead_ended_makes_the_lead_ready(loop_tree: LoopTree
                                                                  ) -> None:
    """The kill settles the child without a run end of its own: the kill books the lead's
    fact again (the child brought nothing new, so the lead is ready)."""
    t = loop_tree
    t.node("lead", {"01-A.md": "[stub:write=a.txt:a]"}, "--max-iters", "1")
    t.cli("node", "init", "kid", "--parent", "lead")
    supervisor = subprocess.Popen(["sleep", "300"], start_new_session=True)  # the kid's
    try:
        ledger = Ledger(find_tree(t.repo).db_path)
        started = psutil.Process(supervisor.pid).create_time()
        assert ledger.move("main.lead.kid", Move.START,
                           supervisor=(supervisor.pid, started)).ok
        ledger.open_run("main.lead.kid", agent="true", max_cost=None, parent_run_id=None)
        assert t.run("lead") == 0
        assert "main.lead.kid (active, still running)" in str(_ready_item(t)["summary"])
        t.cli("node", "kill", "kid")
        assert supervisor.wait(timeout=30) != 0  # the kill stopped it
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
    assert t.status("lead.kid") == "killed"
    assert t.sql("SELECT actor, metadata FROM events WHERE event = 'unmerged' "
                 "ORDER BY event_id") == [
        ("loop", "main.lead.kid (active, still running)"), ("operator", "")]
    assert _ready_item(t)["command"] == "fractal node merge main.lead"
