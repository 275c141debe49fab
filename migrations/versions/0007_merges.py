"""merges: one row per ``fractal node merge`` (child, target, shas, files, status, actor)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

A merge is recorded ``active`` before the target moves and ``merged`` only once the
target's branch contains the squash commit, so an interrupted merge can be told from a
finished one (and finished or rolled back by the next one).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``merges`` and its two indexes."""
    op.create_table(
        "merges",
        sa.Column("merge_id", sa.Integer(), nullable=False),
        sa.Column("child", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("child_sha", sa.Text(), nullable=False),
        sa.Column("target_sha", sa.Text(), nullable=False),
        sa.Column("squash_sha", sa.Text(), nullable=True),
        sa.Column("files", sa.Integer(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=True),
        sa.Column("metadata", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("merge_id", name=op.f("pk_merges")),
    )
    op.create_index("ix_merges_target_status", "merges", ["target", "status"], unique=False)
    op.create_index("ix_merges_child_created_at", "merges", ["child", "created_at"],
                    unique=False)


def downgrade() -> None:
    """Drop ``merges`` (its indexes go with it)."""
    op.drop_index("ix_merges_child_created_at", table_name="merges")
    op.drop_index("ix_merges_target_status", table_name="merges")
    op.drop_table("merges")
