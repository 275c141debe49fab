"""Cleaning a tree up through the CLI: delete (refused, then forced), rescue list and
restore, a reused name, retire/unretire, reset and destroy, on a private tmux server."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

pytestmark = pytest.mark.e2e


def test_delete_rescue_restore_retire_and_a_reused_name(tree: Tree) -> None:
    tree.node("work", {"01-A.md": "[stub:write=feature.txt:hello]"}, "--no-sync",
              "--max-iters", "1")
    tree.cli("node", "start", "work")
    assert tree.wait_settled("work") == "completed"

    refused = tree.cli("node", "delete", "work", check=False)
    assert refused.returncode == 1
    assert "not merged into main" in refused.stderr and "--force" in refused.stderr
    assert tree.status("work") == "completed"
    assert tree.sql("SELECT status FROM events WHERE event = 'delete'") == [("failed",)]

    forced = tree.cli("node", "delete", "work", "--force")
    assert forced.stdout.split() == ["main.work"]
    assert not tree.worktree("work").exists()
    assert git(tree.repo, "branch", "--list", "main.work") == ""
    [rescue] = json.loads(tree.cli("rescue", "list", "--json").stdout)
    assert (rescue["node"], rescue["operation"]) == ("main.work", "delete")
    assert git(tree.repo, "show", f"{rescue['ref']}:feature.txt") == "hello"
    assert "main.work (deleted)" in tree.cli("node", "cost", "breakdown", "--csv").stdout
    assert tree.sql("SELECT COUNT(*) FROM runs WHERE node = 'main.work'") == [(1,)]

    restored = tree.cli("rescue", "restore", rescue["ref"], "--as", "back")
    assert restored.stdout.strip() == "main.back"
    assert (tree.worktree("back") / "feature.txt").read_text().strip() == "hello"

    again = tree.cli("node", "init", "work")  # the deleted name is free again
    assert again.stdout.strip() == "main.work"
    assert tree.cli("node", "status", "work").stdout.strip() == "idle"

    tree.cli("node", "retire", "back", "--reason", "kept for reference")
    listed = json.loads(tree.cli("node", "list", "--json").stdout)
    assert [r["node"] for r in listed] == ["main.work"]
    retired = json.loads(tree.cli("node", "list", "--retired", "--json").stdout)
    assert [(r["node"], r["status"]) for r in retired] == [("main.back", "retired")]
    assert not tree.worktree("back").exists()
    tree.cli("node", "unretire", "back")
    assert tree.status("back") == "idle"
    assert (tree.worktree("back") / "feature.txt").read_text().strip() == "hello"


def test_reset_refuses_a_live_tree_then_reset_and_destroy(tree: Tree) -> None:
    tree.node("held", {"01-A.md": "---\nrequires_approval: true\n---\nwork"}, "--no-sync",
              "--max-iters", "1")
    tree.node("idle")
    tree.cli("node", "start", "held")
    wait_until(lambda: json.loads(tree.cli("node", "pending", "--json").stdout), timeout=30,
               message="gate pending")
    refused = tree.cli("reset", "--force", check=False)
    assert refused.returncode == 1 and "main.held (active)" in refused.stderr
    not_confirmed = tree.cli("reset", check=False)  # no terminal: --force is required
    assert not_confirmed.returncode == 1 and "--force" in not_confirmed.stderr
    tree.cli("node", "kill", "held")
    assert tree.wait_settled("held") == "killed"

    done = tree.cli("reset", "--force")
    assert sorted(done.stdout.split()) == ["main.held", "main.idle"]
    assert git(tree.repo, "branch", "--format=%(refname:short)") == "main"
    assert tree.sql("SELECT COUNT(*) FROM nodes") == [(0,)]
    assert tree.sql("SELECT COUNT(*) FROM runs WHERE node = 'main.held'") == [(1,)]
    rescued = {r["node"] for r in json.loads(tree.cli("rescue", "list", "--json").stdout)}
    assert rescued == {"main.held", "main.idle"}

    tree.node("late")
    tree.cli("destroy", "--force")
    assert not (tree.repo / ".fractal" / "main").exists()
    gone = tree.cli("node", "list", check=False)
    assert gone.returncode == 1 and "no fractal tree" in gone.stderr
    assert len(git(tree.repo, "for-each-ref", "refs/fractal/rescue/").splitlines()) == 3
