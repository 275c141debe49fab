"""nodes.host and the latches table: a ledger shared by several machines

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07

``nodes.host`` names the machine that owns a node's worktree and processes (NULL: a
node registered before this revision, read as this machine's); a reader never treats a
pid of another host as its own. ``latches`` holds the tree-wide brake of a tree whose
ledger is PostgreSQL (one row while it is on), so every clone sees it; a SQLite tree
keeps its ``.paused`` file and leaves the table empty.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``nodes.host``; create ``latches``."""
    op.add_column("nodes", sa.Column("host", sa.Text(), nullable=True))
    op.create_table(
        "latches",
        sa.Column("latch_id", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("latch_id", name=op.f("pk_latches")),
    )


def downgrade() -> None:
    """Drop ``latches`` and ``nodes.host``."""
    op.drop_table("latches")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("host")
