"""The lead story end to end, through the real CLI on a private tmux server: a lead whose
agent knows only its prompts (``tests/stubs/lead_story.py``) spawns three children (two
that conflict, one gated), hands the conflict back in its last planned iteration, merges
it again while its run waits for that re-merge, and ends its run with ``node done``; the
operator is paged once, for the lead ready to merge into ``main``, and the merge brings
all three children's work. Then the same story over a reused child name, and with the
gated child killed at its gate (every merge of its work refused without ``--force``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, recording_hook, wait_until

LEAD = Path(__file__).resolve().parent.parent / "stubs" / "lead_story.py"

pytestmark = pytest.mark.e2e


def _start_lead(tree: Tree, story: Path, hook_dir: Path, **env: str) -> Path:
    """The lead created (SPAWN, then MERGE behind ``wait: children``, one planned
    iteration), the operator's notify hook installed, the lead started; returns the
    directory the hook records its calls in."""
    story.mkdir()
    hook, calls = recording_hook(hook_dir)
    tree.cli("inbox", "notify", str(hook))  # every kind
    tree.node("lead", {"01-SPAWN.md": "Split the task between three children.\n",
                       "02-MERGE.md": "---\nwait: children\n---\nMerge the children.\n"},
              "--agent", f"{sys.executable} {LEAD}", "--max-iters", "1", "--wait", "10m",
              "--max-cost", "5", "--step-timeout", "2m", "--title", "the lead")
    tree.cli("node", "start", "lead", env={
        **os.environ, "STORY_DIR": str(story), "FRACTAL_NOTIFY_IDLE_S": "1",
        "FRACTAL_NOTIFY_BOOT_GRACE_S": "5", **env})
    return calls


def _settled(tree: Tree, story: Path) -> None:
    assert tree.wait_settled("lead", timeout=120) == "completed", \
        (tree.node_dir("lead") / "pane.log").read_text(errors="replace")[-4000:]


def _commands(story: Path) -> list[tuple[str, int]]:
    """What the lead ran, in order: (the command without its program, its exit code)."""
    rows = [json.loads(line) for line in (story / "commands.txt").read_text().splitlines()]
    return [(r["command"].split(" ", 1)[1], r["exit"]) for r in rows]


def _pages(tree: Tree, calls: Path) -> list[list[tuple[str, str]]]:
    """Every call of the notify hook, once the watcher delivered the lead's ready item."""
    wait_until(lambda: ("ready", "main.lead") in
               tree.sql("SELECT kind, node FROM notifications WHERE status != 'pending'"),
               timeout=60, message="the ready item delivered")
    sent = [json.loads(p.read_text()) for p in sorted(calls.glob("*.json"))]
    return [[(e["kind"], e["node"]) for e in call["events"]] for call in sent]


def _the_story_holds(tree: Tree, story: Path) -> None:
    """The hand-back in the last iteration, its re-merge during the run's wait, ``done``
    last; the lead's run completed with the node's own reason."""
    ran = _commands(story)
    merges = [c for c, _ in ran if c.startswith("node merge")]
    assert merges == ["node merge gate", "node merge one", "node merge two",
                      "node merge two --hand-back", "node merge two"], ran
    assert ran[-1][0].startswith("node done") and ran[-1][1] == 0, ran
    waits = [p.read_text() for p in sorted(story.glob("prompt-*.txt"))
             if p.read_text().startswith("SYNC while waiting for the re-merge of main.lead.two")]
    assert "- Handed back, not merged again (1):\n  - two (completed): once it settled, " \
           "merge it again" in waits[-1], waits[-1]
    assert tree.sql("SELECT status, metadata FROM runs WHERE node = 'main.lead'") == [
        ("completed", "Done: every child's work is merged, the hand-back too")]
    assert tree.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.lead'") == [(1,)]


@pytest.mark.timeout(180)
def test_a_lead_delivers_three_children_and_a_hand_back_then_says_done(
        tree: Tree, tmp_path: Path) -> None:
    story = tmp_path / "story"
    calls = _start_lead(tree, story, tmp_path)
    _settled(tree, story)
    _the_story_holds(tree, story)
    assert _pages(tree, calls) == [[("ready", "main.lead")]]

    tree.cli("node", "merge", "lead")
    assert sorted(git(tree.repo, "show", "main:shared.txt").split()) == ["one", "two"]
    assert git(tree.repo, "show", "main:gate.txt") == "gate"
    listed = git(tree.repo, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert not [p for p in listed if p.startswith(".fractal/main.")]
