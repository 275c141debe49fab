"""nodes.worktree relative to the clone: a ledger shared by clones at different paths

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07

A node's worktree is ``<repo>/.worktrees/<node>`` in every clone, wherever the clone
is; the registry now records it relative to the repository (``.worktrees/<node>``), and
readers join it with their own clone's root (``Tree.worktree_at``). Rows written
before this revision held the absolute path of the clone that registered them: those of
that shape are made relative here; any other absolute path is kept, and still read as
it is (a path joined to an absolute one is that absolute one).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Make each ``<anything>/.worktrees/<node>`` worktree ``.worktrees/<node>``."""
    op.execute("UPDATE nodes SET worktree = '.worktrees/' || node "
               "WHERE worktree LIKE '/%' AND worktree LIKE '%/.worktrees/' || node")


def downgrade() -> None:
    """Nothing: a relative path cannot be made absolute without the clone it is read in,
    and the older code never reads the column back."""
