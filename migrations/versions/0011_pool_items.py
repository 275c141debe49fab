"""the pools and pool_items tables: worker pools and their item lists

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01

A pool node works a list of items, one worker node per item, at most a few at a time;
the claim, attempt and result of every item live here (see ``fractal.store.pool``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``pools``, ``pool_items`` and its (pool, status) index."""
    op.create_table(
        "pools",
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("brief", sa.Text(), nullable=False),
        sa.Column("max_workers", sa.Integer(), nullable=False),
        sa.Column("review_done", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("pool", name=op.f("pk_pools")),
    )
    op.create_table(
        "pool_items",
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("worker", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("result", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("claimed_at", sa.Text(), nullable=True),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("pool", "item_id", name=op.f("pk_pool_items")),
    )
    op.create_index("ix_pool_items_pool_status", "pool_items", ["pool", "status"],
                    unique=False)


def downgrade() -> None:
    """Drop ``pool_items`` and ``pools``."""
    op.drop_index("ix_pool_items_pool_status", table_name="pool_items")
    op.drop_table("pool_items")
    op.drop_table("pools")
