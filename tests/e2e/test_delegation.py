"""Delegation through the real CLI on a private tmux server: a lead whose agent knows only
its prompts (``tests/stubs/delegate_lead.py``) spawns two gated children from the tree
mode's commands, its loop waits for them (``wait: children``), it approves each gate from
the SYNC digest, learns of their ends from its radio feed and merges both."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import FRACTAL_BIN, git

LEAD = Path(__file__).resolve().parent.parent / "stubs" / "delegate_lead.py"


@pytest.mark.timeout(300)
def test_a_lead_delegates_with_its_prompts_alone(tree: Tree, tmp_path: Path) -> None:
    story = tmp_path / "story"
    story.mkdir()
    tree.node("lead", {"01-SPAWN.md": "Split the task between two children.\n",
                       "02-MERGE.md": "---\nwait: children\n---\nMerge the children.\n"},
              "--agent", f"{sys.executable} {LEAD}", "--max-iters", "1", "--wait", "10m",
              "--max-cost", "5", "--step-timeout", "2m", "--title", "the lead")
    tree.cli("node", "start", "lead", env={**os.environ, "STORY_DIR": str(story)})
    assert tree.wait_settled("lead", timeout=240) == "completed", \
        (tree.node_dir("lead") / "pane.log").read_text(errors="replace")[-4000:]

    prompts = {p.name: p.read_text() for p in sorted(story.glob("prompt-*.txt"))}
    spawn = next(t for t in prompts.values() if t.startswith("step 1 of 2 (SPAWN)"))
    # every command names the run's fractal by its path (FRACTAL_BIN, rendered)
    assert (f'`{FRACTAL_BIN} node init NAME --title "TITLE" --task-file FILE --gate EXECUTE '
            '--max-iters N --max-cost USD`') in spawn
    assert f"`{FRACTAL_BIN} node start NAME`" in spawn
    assert f"`{FRACTAL_BIN} radio feed`" in spawn
    waits = [t for t in prompts.values() if t.startswith("SYNC while waiting for children")]
    assert waits and f"`{FRACTAL_BIN} node pending`" in waits[0]
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
