"""Limits a model inherits, seen in the prompts the loop renders: a node at the tree's
depth limit gets no spawn protocol; a lead's spawn template carries the caps a child
inherits."""

from __future__ import annotations

from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


def test_a_leaf_at_the_depth_limit_gets_no_spawn_protocol(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("lead", {"01-A.md": "work"}, "--no-sync", "--max-iters", "1", "--max-cost", "8")
    t.cli("node", "init", "kid", "--no-sync", "--max-iters", "1", cwd=t.worktree("lead"))
    assert (t.config("lead")["max_depth"], t.config("lead.kid")["max_depth"]) == (1, 0)
    assert t.config("lead.kid")["max_cost"] == 2.0  # $8 left, split 4 ways
    t.run("lead")
    lead = t.launcher.calls[0].prompt
    assert "## Mode: tree" in lead
    assert "1 levels below you" in " ".join(lead.split())
    assert "--max-iters N --max-children 0 --max-depth 0 --max-cost 2.00`" in lead
    steps = t.node_dir("lead.kid") / "steps"
    for path in steps.iterdir():
        if path.name != "01-PLAN.md":
            path.unlink()
    t.run("lead.kid")
    leaf = t.launcher.calls[-1].prompt
    assert t.launcher.calls[-1].env["NODE_BRANCH"] == "main.lead.kid"
    assert "## Mode: tree" not in leaf and "fractal node init" not in leaf
    assert "## Mode: child" in leaf and "fractal node done" in leaf
    refused = t.cli("node", "init", "deeper", check=False, cwd=t.worktree("lead.kid"))
    assert refused.exit_code == 1 and "max_depth" in refused.output
