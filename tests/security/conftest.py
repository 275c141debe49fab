"""The security tier: a hostile agent (a command-backend script run by the real
supervisor in a private tmux server) tries to get out of what its parent set. It uses the
end-to-end tree (``tests/e2e/conftest.py``)."""

from __future__ import annotations

from tests.e2e.conftest import stub_tree_template, tree

__all__ = ["stub_tree_template", "tree"]
