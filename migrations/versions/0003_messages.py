"""messages: a node's channels (the outbox notice every exited run posts)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Every exited run posts a notice (priority 7, subject ``run exited: <reason>``) to
the node's outbox. One row per message; ``message_uuid`` is 8 hex
characters; ``priority`` 0-10.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``messages`` and its (node, channel) index."""
    op.create_table(
        "messages",
        sa.Column("message_id", sa.Integer(), nullable=False),
        sa.Column("message_uuid", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("sender", sa.Text(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("metadata", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("message_id", name=op.f("pk_messages")),
        sa.UniqueConstraint("message_uuid", name=op.f("uq_messages_message_uuid")),
    )
    op.create_index("ix_messages_node_channel", "messages", ["node", "channel"], unique=False)


def downgrade() -> None:
    """Drop ``messages``."""
    op.drop_index("ix_messages_node_channel", table_name="messages")
    op.drop_table("messages")
