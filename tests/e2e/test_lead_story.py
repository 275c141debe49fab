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
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, recording_hook, wait_until

LEAD = Path(__file__).resolve().parent.parent / "stubs" / "lead_story.py"

pytestmark = pytest.mark.e2e


def _start_lead(tree: Tree, story: Path, hook_dir: Path,
                prepare: Callable[[], None] = lambda: None, **env: str) -> Path:
    """The lead created (SPAWN, then MERGE behind ``wait: children``, one planned
    iteration), ``prepare`` run, the operator's notify hook installed, the lead started;
    returns the directory the hook records its calls in."""
    story.mkdir()
    tree.node("lead", {"01-SPAWN.md": "Split the task between three children.\n",
                       "02-MERGE.md": "---\nwait: children\n---\nMerge the children.\n"},
              "--agent", f"{sys.executable} {LEAD}", "--max-iters", "1", "--wait", "10m",
              "--max-cost", "5", "--step-timeout", "2m", "--title", "the lead")
    prepare()
    hook, calls = recording_hook(hook_dir)
    tree.cli("inbox", "notify", str(hook))  # every kind
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


def _the_story_holds(tree: Tree, story: Path, gate_merged: bool = True) -> None:
    """The hand-back in the last iteration, its re-merge during the run's wait, ``done``
    last; the lead's run completed with the node's own reason."""
    ran = _commands(story)
    merges = [(c, code) for c, code in ran if c.startswith("node merge")]
    assert merges == [("node merge gate", 0 if gate_merged else 1), ("node merge one", 0),
                      ("node merge two", 1), ("node merge two --hand-back", 0),
                      ("node merge two", 0)], ran
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


@pytest.mark.timeout(180)
def test_the_story_over_a_reused_child_name(tree: Tree, tmp_path: Path) -> None:
    """A ``gate`` child ran, ended and was deleted before the lead began; the lead's own
    ``gate`` starts with no trace of it: no prompt, view or page carries its reason."""
    story = tmp_path / "story"

    def namesake() -> None:
        task = tmp_path / "old-task.md"
        task.write_text("The old gate. [stub:done=the old namesake]\n")
        tree.cli("node", "init", "gate", "--task-file", str(task), "--max-iters", "1",
                 "--no-sync", cwd=tree.worktree("lead"))
        tree.cli("node", "start", "lead.gate")
        assert tree.wait_settled("lead.gate") == "completed"
        tree.cli("node", "delete", "lead.gate", "--force")

    calls = _start_lead(tree, story, tmp_path, prepare=namesake)
    _settled(tree, story)
    _the_story_holds(tree, story)
    assert _pages(tree, calls) == [[("ready", "main.lead")]]
    assert not [p.name for p in story.glob("prompt-*.txt") if "old namesake" in p.read_text()]
    for view in (("node", "status", "lead.gate"), ("node", "list"), ("inbox",)):
        assert "old namesake" not in tree.cli(*view).stdout, view

    tree.cli("node", "merge", "lead")
    assert sorted(git(tree.repo, "show", "main:shared.txt").split()) == ["one", "two"]
    assert git(tree.repo, "show", "main:gate.txt") == "gate"


@pytest.mark.timeout(180)
def test_the_story_with_a_child_killed_at_its_gate(tree: Tree, tmp_path: Path) -> None:
    """The operator kills ``gate`` at its gate (the lead leaves gates alone here): the
    lead's merge of it is refused, the lead completes without its work; the one page
    carries that refusal and the lead's end, which says what is missing instead of
    "ready"; the merge into ``main`` is refused without ``--force``, naming the child."""
    story = tmp_path / "story"
    calls = _start_lead(tree, story, tmp_path, STORY_APPROVE="no")
    wait_until(lambda: tree.sql("SELECT COUNT(*) FROM steps WHERE node = 'main.lead.gate' "
                                "AND metadata = 'awaiting approval'") == [(1,)], timeout=60,
               message="gate waits for approval")
    tree.cli("node", "kill", "lead.gate")
    _settled(tree, story)
    _the_story_holds(tree, story, gate_merged=False)
    refusal = [json.loads(line)["stderr"] for line in
               (story / "commands.txt").read_text().splitlines()
               if json.loads(line)["command"].endswith("node merge gate")]
    assert "EXECUTE never approved" in refusal[0], refusal
    assert _pages(tree, calls) == [[("merge", "main.lead.gate"), ("ready", "main.lead")]]
    (refused_merge, lead), = [json.loads(p.read_text())["events"]
                              for p in sorted(calls.glob("*.json"))]
    assert "EXECUTE never approved" in refused_merge["summary"]
    assert refused_merge["command"] == "fractal node merge main.lead.gate --force"
    assert "ready to merge" not in lead["summary"]
    assert "main.lead.gate (killed, its work never merged into main.lead)" in lead["summary"]
    assert lead["command"] == "fractal node merge main.lead --force"

    refused = tree.cli("node", "merge", "lead", check=False)
    assert refused.returncode == 1 and "main.lead.gate" in refused.stderr, refused.stderr
    assert "--force" in refused.stderr
    tree.cli("node", "merge", "lead", "--force")
    assert sorted(git(tree.repo, "show", "main:shared.txt").split()) == ["one", "two"]
    assert "gate.txt" not in git(tree.repo, "ls-tree", "-r", "--name-only", "main")
