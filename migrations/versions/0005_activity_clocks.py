"""indexes on every timestamp the ``activity`` view sorts by

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

``fractal node activity --limit 50`` should answer in under 300 ms on 100,000
step rows. The view is a UNION ALL that SQLite cannot sort lazily, so the reader first
finds the newest ``limit`` instants from these indexes (each read backwards, a few
rows deep; the (node, column) ones when the listing is one node's) and only then asks the view for rows at or after the oldest of them, which
SQLite pushes down into every arm as an index range. Index-only change: no table or
view is rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLOCKS = (("runs", "started_at"), ("runs", "ended_at"), ("iterations", "started_at"),
          ("iterations", "ended_at"), ("steps", "started_at"), ("steps", "ended_at"),
          ("events", "created_at"), ("checks", "ended_at"))


def upgrade() -> None:
    """Index each column in ``CLOCKS``: ``ix_<table>_<column>`` for the whole tree's
    activity and ``ix_<table>_node_<column>`` on (node, column) for one node's."""
    for table, column in CLOCKS:
        op.create_index(op.f(f"ix_{table}_{column}"), table, [column], unique=False)
        op.create_index(op.f(f"ix_{table}_node_{column}"), table, ["node", column],
                        unique=False)


def downgrade() -> None:
    """Drop the indexes again."""
    for table, column in reversed(CLOCKS):
        op.drop_index(op.f(f"ix_{table}_node_{column}"), table_name=table)
        op.drop_index(op.f(f"ix_{table}_{column}"), table_name=table)
