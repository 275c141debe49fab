"""A child's ``scripts/`` (writable by its agent) run only in that node's sandbox (issue
29). ``setup.sh`` runs from the node's own supervisor, confined like every launch; a
``lint.sh`` run by a ``fractal commit`` its agent asks for runs confined too. On the code
before, the operator's own ``fractal commit`` in the node's worktree ran the node's
``lint.sh`` unsandboxed, as the operator: an agent could leave one that wrote anywhere
the operator can."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.trees import Tree

pytestmark = pytest.mark.e2e

LINT = """#!/bin/bash
echo ran > "$NODE_DIR/tmp/lint-ran"
echo planted > "$HOME/planted-by-lint" || echo "home is read-only"
exit 0
"""


def test_the_operators_commit_runs_a_childs_lint_in_its_sandbox(sandboxed_tree: Tree) -> None:
    tree = sandboxed_tree
    ndir = tree.node("a", {"01-A.md": "work"}, "--max-iters", "1", "--no-sync")
    tree.cli("node", "start", "a")
    assert tree.wait_settled("a", timeout=120) == "completed"
    (ndir / "scripts").mkdir(exist_ok=True)
    (ndir / "scripts" / "lint.sh").write_text(LINT)  # as its agent could have
    (tree.worktree("a") / "work.txt").write_text("the operator's edit\n")
    planted = Path(os.environ["HOME"]) / "planted-by-lint"
    try:
        done = tree.cli("commit", "an edit by hand", cwd=tree.worktree("a"))
        assert (ndir / "tmp" / "lint-ran").read_text() == "ran\n"  # it ran, inside
        assert not planted.exists(), done.stdout + done.stderr
    finally:
        planted.unlink(missing_ok=True)
