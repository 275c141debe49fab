"""inbox acknowledgements and notify deliveries

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

Two small tables: ``inbox_acks`` (an attention item the operator acknowledged, hidden
while its state is unchanged) and ``notifications`` (each attention event claimed for
the ``notify`` command, at most once, with how its delivery ended).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``inbox_acks`` and ``notifications``, each unique on ``item_key``."""
    op.create_table(
        "inbox_acks",
        sa.Column("ack_id", sa.Integer(), nullable=False),
        sa.Column("item_key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("ack_id", name=op.f("pk_inbox_acks")),
        sa.UniqueConstraint("item_key", name=op.f("uq_inbox_acks_item_key")),
    )
    op.create_table(
        "notifications",
        sa.Column("notification_id", sa.Integer(), nullable=False),
        sa.Column("item_key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("batch", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("metadata", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("notification_id", name=op.f("pk_notifications")),
        sa.UniqueConstraint("item_key", name=op.f("uq_notifications_item_key")),
    )


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("notifications")
    op.drop_table("inbox_acks")
