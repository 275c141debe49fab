"""Delegation through the real CLI on a private tmux server: a lead whose agent knows only
its prompts (``tests/stubs/delegate_lead.py``) spawns two gated children from the tree
mode's commands, its loop waits for them (``wait: children``), it approves each gate from
the SYNC digest, learns of their ends from its radio feed and merges both."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import FRACTAL_BIN, git, recording_hook, wait_until

LEAD = Path(__file__).resolve().parent.parent / "stubs" / "delegate_lead.py"


def _lead_story(tree: Tree, story: Path, **env: str) -> None:
    """The lead of the module docstring, started and run to its end (``completed``)."""
    story.mkdir()
    tree.node("lead", {"01-SPAWN.md": "Split the task between two children.\n",
                       "02-MERGE.md": "---\nwait: children\n---\nMerge the children.\n"},
              "--agent", f"{sys.executable} {LEAD}", "--max-iters", "1", "--wait", "10m",
              "--max-cost", "5", "--step-timeout", "2m", "--title", "the lead")
    tree.cli("node", "start", "lead", env={**os.environ, "STORY_DIR": str(story), **env})
    assert tree.wait_settled("lead", timeout=240) == "completed", \
        (tree.node_dir("lead") / "pane.log").read_text(errors="replace")[-4000:]


@pytest.mark.timeout(300)
def test_a_lead_delegates_with_its_prompts_alone(tree: Tree, tmp_path: Path) -> None:
    story = tmp_path / "story"
    _lead_story(tree, story)

    prompts = {p.name: p.read_text() for p in sorted(story.glob("prompt-*.txt"))}
    spawn = next(t for t in prompts.values() if t.startswith("step 1 of 2 (SPAWN)"))
    # every command names the run's fractal by its path (FRACTAL_BIN, rendered)
    assert (f'`{FRACTAL_BIN} node init NAME --title "TITLE" --task-file FILE --gate EXECUTE '
            '--max-iters N --max-children 0 --max-depth 0 --max-cost 1.25`') in spawn
    assert f"`{FRACTAL_BIN} node start NAME`" in spawn
    assert f"`{FRACTAL_BIN} radio feed`" in spawn
    waits = [t for t in prompts.values() if t.startswith("SYNC while waiting for children")]
    assert waits and f"`{FRACTAL_BIN} node pending`" in waits[0]
    assert "- Waiting for 2 children (the step runs once each has settled):" in waits[0]
    assert sorted((story / "approved.txt").read_text().split("\n")[:-1]) == [
        f"{FRACTAL_BIN} node approve div", f"{FRACTAL_BIN} node approve ops"]
    assert (story / "merged.txt").read_text().split() == ["div", "ops"]

    for name in ("div", "ops"):
        assert tree.status(f"lead.{name}") == "completed"
        gate = tree.sql("SELECT status, approved FROM steps WHERE node = ? AND "
                        "step_name = 'EXECUTE'", f"main.lead.{name}")
        assert gate[0][0] == "completed" and gate[0][1]
    (wait,), = tree.sql("SELECT metadata FROM steps WHERE node = 'main.lead' AND "
                        "step_name = 'WAIT'")
    assert str(wait).startswith("waited for 2 children")
    subjects = [str(s) for (s,) in tree.sql("SELECT subject FROM messages WHERE channel = "
                                            "'outbox' AND node LIKE 'main.lead.%'")]
    assert sum(s.startswith("run completed") for s in subjects) == 2, subjects
    assert sum("awaits approval" in s for s in subjects) == 2
    assert sum("merged into main.lead" in s for s in subjects) == 2
    log = git(tree.repo, "log", "--format=%s", "main.lead")
    assert "main.lead: merge main.lead.div (the div part)" in log
    assert "main.lead: merge main.lead.ops (the ops part)" in log
    listed = git(tree.repo, "ls-tree", "-r", "--name-only", "main.lead").splitlines()
    assert "div.txt" in listed and "ops.txt" in listed


@pytest.mark.timeout(300)
def test_the_operator_is_paged_once_for_a_lead_story_ready_to_merge(tree: Tree,
                                                                     tmp_path: Path) -> None:
    """The children's gates are the lead's (it approves them from its digest within
    seconds): the operator's notify hook fires once, for the lead's completed run, ready
    to merge into main; after the merge, status says so."""
    from fractal.lifecycle import notify
    from fractal.tree import Tree as FractalTree

    hook, calls = recording_hook(tmp_path)
    tree.cli("inbox", "notify", str(hook))  # every kind
    _lead_story(tree, tmp_path / "story", FRACTAL_NOTIFY_IDLE_S="1",
                FRACTAL_NOTIFY_BOOT_GRACE_S="5")
    wait_until(lambda: tree.sql("SELECT kind, node, status FROM notifications WHERE status "
                                "!= 'pending'") == [("ready", "main.lead", "completed")],
               timeout=60, message="the ready item delivered")
    watched = FractalTree(repo=tree.repo, root="main")
    wait_until(lambda: not notify.watcher_running(watched), timeout=60,
               message="the watcher exits once the tree is idle")
    sent = [json.loads(p.read_text()) for p in sorted(calls.glob("*.json"))]
    assert [[(e["kind"], e["node"]) for e in call["events"]] for call in sent] == [
        [("ready", "main.lead")]]
    (event,), = [call["events"] for call in sent]
    assert "ready to merge into main" in event["summary"]
    assert event["command"] == "fractal node merge main.lead"
    assert "`fractal node diff main.lead`" in event["summary"]
    assert tree.sql("SELECT kind FROM notifications WHERE kind != 'ready'") == []

    tree.cli("node", "merge", "lead")
    sha = git(tree.repo, "rev-parse", "--short=7", "main")
    assert f"merged into main ({sha})" in tree.cli("node", "status", "lead").stdout
    assert f"merged into main ({sha})" in tree.cli("node", "list").stdout
    assert json.loads(tree.cli("inbox", "--json").stdout) == []
