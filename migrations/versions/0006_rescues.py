"""rescues: the rescue refs written before every destructive verb

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Before ``node delete --force``, ``reset``, ``destroy``, ``start --continue --clean``, a
merge's restore or a forced retire removes anything, fractal writes a rescue ref
(``refs/fractal/rescue/<branch>/<stamp>``) holding the branch tip plus the worktree's
unsaved files, and books one row here: which node, which verb, the ref and its commit,
the tip it extends, the files it saved (a JSON array) and when. ``fractal rescue list``
reads it back; the refs themselves outlive the database.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``rescues`` with a unique ref and an index on the node."""
    op.create_table(
        "rescues",
        sa.Column("rescue_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column("ref", sa.Text(), nullable=False),
        sa.Column("sha", sa.Text(), nullable=False),
        sa.Column("tip", sa.Text(), nullable=False),
        sa.Column("files", sa.Text(), server_default=sa.text("'[]'"), nullable=False),
        sa.Column("actor", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("rescue_id", name=op.f("pk_rescues")),
        sa.UniqueConstraint("ref", name=op.f("uq_rescues_ref")),
    )
    op.create_index(op.f("ix_rescues_node"), "rescues", ["node"], unique=False)


def downgrade() -> None:
    """Drop ``rescues`` (the refs stay in the repository)."""
    op.drop_index(op.f("ix_rescues_node"), table_name="rescues")
    op.drop_table("rescues")
