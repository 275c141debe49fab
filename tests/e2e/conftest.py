"""End-to-end fixtures: a real repository, the real CLI, a private tmux server.

The agent is ``tests/stubs/agent_stub.py`` behind a wrapper script: a real process that
speaks the command backend's protocol and obeys ``[stub:...]`` markers in its prompt.
The harness itself (``Tree``, ``run_cli``) lives in ``tests/trees.py``, shared with the
soak tier; the names are re-exported here for the tests that import them from this file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trees import SETTLED, STUB, Tree, agent_wrapper, init_tree, run_cli

__all__ = ["SETTLED", "STUB", "Tree", "run_cli", "tree"]


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    """A fresh repository with a tree whose agent is the stub; its tmux sessions are killed
    at teardown."""
    agent = agent_wrapper(tmp_path / "bin" / "stub-agent", STUB)
    init_tree(tmp_path / "repo", agent)
    t = Tree(repo=tmp_path / "repo", agent=agent)
    try:
        yield t
    finally:
        t.kill_sessions()
