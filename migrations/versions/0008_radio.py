"""radio: replies, withdrawn messages, read receipts and saved messages

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

``messages`` gains ``parent_message_uuid`` (the message a reply answers; indexed, so a
thread is found without a scan) and ``unsent_at`` (set when the sender withdraws the
message; the row stays). ``reads`` holds one read receipt per (message, reader) and
``saves`` one saved mark per (message, node). Existing messages keep working: both new
columns are NULL for them (a thread of their own, never withdrawn).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MARKS = (("reads", "read_id"), ("saves", "save_id"))


def upgrade() -> None:
    """Add the two ``messages`` columns and the ``reads`` and ``saves`` tables."""
    op.add_column("messages", sa.Column("parent_message_uuid", sa.Text(), nullable=True))
    op.add_column("messages", sa.Column("unsent_at", sa.Text(), nullable=True))
    op.create_index(op.f("ix_messages_parent_message_uuid"), "messages",
                    ["parent_message_uuid"], unique=False)
    for table, key in _MARKS:
        op.create_table(
            table,
            sa.Column(key, sa.Integer(), nullable=False),
            sa.Column("message_id", sa.Integer(), nullable=False),
            sa.Column("node", sa.Text(), nullable=False),
            sa.Column("created_at", sa.Text(), nullable=False),
            sa.ForeignKeyConstraint(["message_id"], ["messages.message_id"],
                                    name=op.f(f"fk_{table}_message_id_messages")),
            sa.PrimaryKeyConstraint(key, name=op.f(f"pk_{table}")),
            sa.UniqueConstraint("message_id", "node", name=op.f(f"uq_{table}_message_id_node")),
        )


def downgrade() -> None:
    """Drop the tables and the columns again (SQLite drops columns by a table copy)."""
    for table, _key in reversed(_MARKS):
        op.drop_table(table)
    op.drop_index(op.f("ix_messages_parent_message_uuid"), table_name="messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("unsent_at")
        batch.drop_column("parent_message_uuid")
