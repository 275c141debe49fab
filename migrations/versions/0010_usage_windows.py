"""the usage_windows table: one closed or reopening usage window per credential

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

When one node's agent reports that its subscription window is used up, every node on
the same credential waits for the reset instead of finding the closed window itself;
this row is what they share (see ``fractal.store.windows``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``usage_windows``."""
    op.create_table(
        "usage_windows",
        sa.Column("credential", sa.Text(), nullable=False),
        sa.Column("window", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("resets_at", sa.REAL().with_variant(sa.Double(), "postgresql"), nullable=True),
        sa.Column("wake_at", sa.REAL().with_variant(sa.Double(), "postgresql"), nullable=False),
        sa.Column("prober", sa.Text(), nullable=True),
        sa.Column("probe_started", sa.REAL().with_variant(sa.Double(), "postgresql"), nullable=True),
        sa.Column("misses", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("opened_at", sa.REAL().with_variant(sa.Double(), "postgresql"), nullable=True),
        sa.Column("released", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("closed_by", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("credential", name=op.f("pk_usage_windows")),
    )


def downgrade() -> None:
    """Drop ``usage_windows``."""
    op.drop_table("usage_windows")
