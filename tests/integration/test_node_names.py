"""A short node name through the real CLI on a tree where two nodes answer to it
(``main.a1.x`` and ``main.a2.x``): inside a loop it means the name nearest the loop's
node, outside any loop it covers the whole tree and an ambiguity is refused."""

from __future__ import annotations

import json
from pathlib import Path

from tests.trees import cousins_node_dir, run_cli_as


def test_inside_a_loop_a_short_name_means_the_loops_own_child(cousins: Path) -> None:
    a2 = cousins / ".worktrees" / "main.a2"
    out = run_cli_as(a2, "node", "list", "x", "--json",
                     loop=cousins_node_dir(cousins, "main.a2"))
    assert out.returncode == 0, out.stderr
    assert [r["node"] for r in json.loads(out.stdout)] == ["main.a2.x"]
    out = run_cli_as(cousins, "node", "list", "x", "--json",
                     loop=cousins_node_dir(cousins, "main.a1"))
    assert out.returncode == 0, out.stderr
    assert [r["node"] for r in json.loads(out.stdout)] == ["main.a1.x"]
    # Outside any loop the name still covers the whole tree, from a worktree as well.
    for where in (cousins, a2):
        out = run_cli_as(where, "node", "status", "x")
        assert out.returncode == 1 and "ambiguous: main.a1.x, main.a2.x" in out.stderr
