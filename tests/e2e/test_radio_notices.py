"""The loop's notices through the real CLI: a gate that starts waiting and a run's end
reach the root's radio feed (the operator learns of them without polling)."""

from __future__ import annotations

import json
import re

from tests.e2e.conftest import Tree
from tests.helpers import wait_until


def _feed(tree: Tree) -> list[dict[str, object]]:
    rows = json.loads(tree.cli("radio", "feed", "--json").stdout)
    assert isinstance(rows, list)
    return rows


def test_gate_and_run_end_notices_reach_the_roots_feed(tree: Tree) -> None:
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]",
             "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("gated", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "gated")
    pending = wait_until(lambda: json.loads(tree.cli("node", "pending", "--json").stdout),
                         timeout=30, message="gate pending")
    step_id = pending[0]["step_id"]
    gate = wait_until(lambda: [r for r in _feed(tree) if "awaits approval" in str(r["subject"])],
                      timeout=10, message="the gate's notice")
    assert [(r["node"], r["channel"], r["sender"], r["priority"], r["subject"]) for r in gate] \
        == [("main.gated", "outbox", "main.gated", 7,
             f"A awaits approval: fractal node approve main.gated {step_id}")]
    assert re.search(r"^ a\.txt +\| 1 \+$", str(gate[0]["data"]), re.MULTILINE)
    tree.cli("node", "approve", "gated")
    assert tree.wait_settled("gated") == "completed"
    ends = [r for r in _feed(tree) if str(r["subject"]).startswith("run ")]
    assert [r["subject"] for r in ends] == ["run completed: Reached max iterations (1)"]
    assert "run 1 spent " in str(ends[0]["data"])
