"""End-to-end fixtures: a real repository, the real CLI, a private tmux server.

The agent is ``tests/stubs/agent_stub.py`` behind a wrapper script: a real process that
speaks the command backend's protocol and obeys ``[stub:...]`` markers in its prompt.
The harness itself (``Tree``, ``run_cli``) lives in ``tests/trees.py``, shared with the
soak tier; the names are re-exported here for the tests that import them from this file.

``fractal init`` runs once per session, into a template repository; each test's ``tree``
is a copy of it (the tree holds no absolute path until its first node is created).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trees import SETTLED, STUB, Tree, agent_wrapper, init_tree, run_cli

__all__ = ["SETTLED", "STUB", "Tree", "run_cli", "tree"]


@pytest.fixture(scope="session")
def stub_tree_template(hermetic_session: Path) -> tuple[Path, Path]:
    """(repository, agent): a tree made once per session whose agent is the stub."""
    agent = agent_wrapper(hermetic_session / "bin" / "stub-agent", STUB)
    repo = hermetic_session / "templates" / "stub-tree" / "repo"
    init_tree(repo, agent)
    return repo, agent


@pytest.fixture
def tree(tmp_path: Path, stub_tree_template: tuple[Path, Path]) -> Iterator[Tree]:
    """A fresh repository with a tree whose agent is the stub (a copy of the session's
    template); its tmux sessions are killed at teardown."""
    template, agent = stub_tree_template
    shutil.copytree(template, tmp_path / "repo", symlinks=True)
    t = Tree(repo=tmp_path / "repo", agent=agent)
    try:
        yield t
    finally:
        t.kill_sessions()
