"""Fixtures of the security tier, where a hostile agent run by the real supervisor tries
to get out of what its parent set: the e2e tree as ``tree`` (``tests/e2e/conftest.py``),
the same tree with its ``sandbox`` set to ``on`` (``sandboxed_tree``), and a hostile
command-backend agent that attacks what it can reach and writes what happened into its
own node's ``tmp/`` (``hostile_node``)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import stub_tree_template, tree
from tests.helpers import git
from tests.trees import Tree, set_sandbox

__all__ = ["hostile_node", "sandboxed_tree", "stub_tree_template", "tree"]


@pytest.fixture
def sandboxed_tree(tmp_path: Path, stub_tree_template: tuple[Path, Path]) -> Iterator[Tree]:
    """A fresh copy of the stub tree whose config says ``"sandbox": "on"``."""
    template, agent = stub_tree_template
    shutil.copytree(template, tmp_path / "repo", symlinks=True)
    set_sandbox(tmp_path / "repo", "on")
    t = Tree(repo=tmp_path / "repo", agent=agent)
    try:
        yield t
    finally:
        t.kill_sessions()


def hostile_node(tree: Tree, tmp_path: Path, body: str, facts: dict[str, object]) -> Path:
    """Make ``main.a`` (the parent), ``main.a.c`` (a sibling) and ``main.a.b``, whose one
    step runs a Python agent: ``body`` (statements using ``FACTS``, ``attempt(name, fn)``
    and ``REPORT``) between a prologue that reads the prompt and an epilogue that writes
    ``REPORT`` as JSON to ``<main.a.b's node dir>/tmp/report.json`` and reports a zero
    cost. Returns the report's path (read it once the node has settled)."""
    tree.node("a", {"01-A.md": "lead"}, "--max-cost", "5")
    tree.cli("node", "init", "c", "--parent", "a", "--max-cost", "1")
    agent = tmp_path / "hostile-agent"
    tree.cli("node", "init", "b", "--parent", "a", "--max-cost", "1", "--no-sync",
             "--max-iters", "1", "--agent", str(agent), "--step-timeout", "5m")
    report = tree.node_dir("a.b") / "tmp" / "report.json"
    agent.write_text(f"""#!{sys.executable}
import json, os, subprocess, sys, time
sys.stdin.read()
FACTS = json.loads({json.dumps(json.dumps(facts))})
REPORT = {{}}
def attempt(name, fn):
    try:
        out = fn()
        REPORT[name] = {{"ok": True, "detail": str(out)}}
    except Exception as exc:
        REPORT[name] = {{"ok": False, "detail": type(exc).__name__ + ": " + str(exc)}}
{body}
os.makedirs(os.path.dirname({str(report)!r}), exist_ok=True)
with open({str(report)!r}, "w") as out:
    json.dump(REPORT, out)
print(json.dumps({{"type": "cost", "usd": 0.0}}))
""")
    agent.chmod(0o755)
    steps = tree.node_dir("a.b") / "steps"
    shutil.rmtree(steps)
    steps.mkdir()
    (steps / "01-TRY.md").write_text("attack what you can reach")
    git(tree.worktree("a.b"), "add", "-A")
    git(tree.worktree("a.b"), "commit", "-q", "-m", "one step", "--no-verify")
    return report


def read_report(path: Path) -> dict[str, dict[str, object]]:
    """The hostile agent's report: attack name -> {"ok": it succeeded, "detail": ...}."""
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data
