"""The tree story through the real CLI on a private tmux server: a scripted lead spawns two
children, merges the first from inside its own step, meets a conflict with the second (its
worktree untouched), hands it back, the child resolves it from RESOLVE.md's file list, the
re-merge is clean; then the operator merges the lead into ``main`` and no node directory
lands there. The agents are ``tests/stubs/tree_story.py``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git

STORY = Path(__file__).resolve().parent.parent / "stubs" / "tree_story.py"


@pytest.mark.timeout(420)
def test_spawn_merge_conflict_hand_back_and_merge_home(tree: Tree, tmp_path: Path) -> None:
    (tree.repo / "calc").mkdir()
    (tree.repo / "calc" / "ops.py").write_text("x = 0\n")
    git(tree.repo, "add", "calc")
    git(tree.repo, "commit", "-q", "-m", "calc")
    story = tmp_path / "story"
    story.mkdir()
    tree.node("lead", {"01-LEAD.md": "Lead the children.\n"}, "--agent",
              f"{sys.executable} {STORY} lead", "--max-iters", "1", "--no-sync",
              "--step-timeout", "6m", "--title", "the lead")
    env = {**os.environ, "STORY_DIR": str(story)}
    tree.cli("node", "start", "lead", env=env)
    assert tree.wait_settled("lead", timeout=360) == "completed", \
        (tree.node_dir("lead") / "pane.log").read_text(errors="replace")[-4000:]
    assert (story / "lead-done").exists()

    conflict = json.loads((story / "conflict.json").read_text())
    assert conflict["exit"] == 1 and "calc/ops.py" in conflict["stderr"]
    assert conflict["before"] == conflict["after"]  # the lead's worktree, byte for byte

    ops = git(tree.repo, "show", "main.lead:calc/ops.py").splitlines()
    assert ops[0] == "x = 0" and set(ops[1:]) == {"one = 'one'", "two = 'two'"}
    rows = tree.sql("SELECT child, status, actor FROM merges ORDER BY merge_id")
    assert rows == [("main.lead.one", "merged", "main.lead"),
                    ("main.lead.two", "failed", "main.lead"),
                    ("main.lead.two", "failed", "main.lead"),
                    ("main.lead.two", "merged", "main.lead")]
    runs = tree.sql("SELECT COUNT(*) FROM runs WHERE node = 'main.lead.two'")
    assert runs == [(2,)]
    prompts = tree.sql("SELECT COUNT(*) FROM events WHERE node = 'main.lead.two' "
                       "AND event = 'merge' AND metadata LIKE '%handed back%'")
    assert prompts == [(1,)]

    out = tree.cli("node", "merge", "lead")
    assert out.stdout.strip() == git(tree.repo, "rev-parse", "main")
    listed = git(tree.repo, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert "calc/ops.py" in listed
    assert not [p for p in listed if p.startswith(".fractal/main.")]
    assert git(tree.repo, "log", "-1", "--format=%s", "main") == \
        "main: merge main.lead (the lead)"


def test_an_iteration_left_in_conflict_fails_and_commits_nothing(tree: Tree,
                                                                  tmp_path: Path) -> None:
    (tree.repo / "calc").mkdir()
    (tree.repo / "calc" / "ops.py").write_text("x = 0\n")
    git(tree.repo, "add", "calc")
    git(tree.repo, "commit", "-q", "-m", "calc")
    agent = tmp_path / "conflicting-agent"
    agent.write_text("#!/bin/sh\ncat >/dev/null\nset -e\nme=$(git symbolic-ref --short HEAD)\n"
                     "git checkout -q -b side\necho 'x = 2' > calc/ops.py\n"
                     "git commit -qam side\ngit checkout -q \"$me\"\n"
                     "echo 'x = 1' > calc/ops.py\ngit commit -qam ours\n"
                     "git merge -q side || true\n")
    agent.chmod(0o755)
    tree.node("clash", {"01-WORK.md": "Work.\n"}, "--agent", str(agent), "--max-iters", "1",
              "--no-sync")
    tree.cli("node", "start", "clash")
    tree.wait_settled("clash", timeout=90)
    reasons = tree.sql("SELECT metadata FROM iterations WHERE node = 'main.clash'")
    assert reasons == [("unresolved merge conflict in calc/ops.py",)]
    wt = tree.worktree("clash")
    assert "<<<<<<<" in (wt / "calc" / "ops.py").read_text()  # left exactly as it was
    assert git(wt, "log", "-1", "--format=%s") == "ours"
    activity = tree.cli("node", "activity", "clash", "--json").stdout
    assert "unresolved merge conflict in calc/ops.py" in activity
    pane = (tree.node_dir("clash") / "pane.log").read_text(errors="replace")
    assert "calc/ops.py" in pane


@pytest.mark.timeout(180)
def test_a_merge_refused_inside_the_leads_step_is_visible_after_the_run(
        tree: Tree, tmp_path: Path) -> None:
    """The lead's agent runs ``fractal node merge kid`` inside its step with its worktree
    dirty: refused. The step and the run still complete (the agent carried on), and the
    refusal is in the lead's status, the inbox, the feed and the lead's activity."""
    agent = tmp_path / "dirty-lead"
    agent.write_text("#!/bin/sh\ncat >/dev/null\necho 'half done' >> README.md\n"
                     f"'{sys.executable}' -m fractal node merge kid || echo \"refused: $?\"\n")
    agent.chmod(0o755)
    tree.node("lead", {"01-MERGE.md": "Merge kid.\n"}, "--agent", str(agent), "--max-iters",
              "1", "--no-sync")
    tree.cli("node", "init", "kid", cwd=tree.worktree("lead"))
    kid = tree.worktree("lead.kid")
    (kid / "kid.txt").write_text("kid\n")
    git(kid, "add", "kid.txt")
    git(kid, "commit", "-q", "-m", "kid's work")
    tree.cli("node", "start", "lead")
    assert tree.wait_settled("lead", timeout=120) == "completed", \
        (tree.node_dir("lead") / "pane.log").read_text(errors="replace")[-4000:]
    assert {s for (s,) in tree.sql("SELECT status FROM steps WHERE node = 'main.lead'")} == \
        {"completed"}
    assert "refused: 1" in (tree.node_dir("lead") / "pane.log").read_text(errors="replace")
    status = tree.cli("node", "status", "lead").stdout
    assert "merge of kid refused (`fractal inbox` says why)" in status, status
    items = json.loads(tree.cli("inbox", "--json").stdout)
    merge = [i for i in items if i["kind"] == "merge"]
    assert [i["node"] for i in merge] == ["main.lead.kid"]
    assert "did not land: refused: main.lead's worktree has uncommitted changes" in \
        str(merge[0]["summary"])
    feed = json.loads(tree.cli("radio", "feed", "--json").stdout)
    assert "main.lead.kid not merged into main.lead: refused" in [r["subject"] for r in feed]
    activity = json.loads(tree.cli("node", "activity", "lead", "--json").stdout)
    assert [r["reason"] for r in activity if r["event"] == "merge"] == [
        "refused: merge of main.lead.kid: main.lead's worktree has uncommitted changes "
        "outside its node directory: README.md; commit them (`fractal commit MESSAGE` in a "
        "node, git at the root) or stash them, then merge again"]
