"""Indexes for the attention inbox: events by (event, node), steps by (run_id, cost)

Revision ID: 0014
Revises: 0012
Create Date: 2026-12-01

The inbox and the dashboard read each node's newest event of one kind (``pause``,
``usage_wait``) for the whole tree, and the own spend of the runs that ended; the first
index answers the former without scanning the events, the second sums a run's step costs
from the index alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``ix_events_event_node`` and ``ix_steps_run_id_cost``."""
    op.create_index("ix_events_event_node", "events", ["event", "node"])
    op.create_index("ix_steps_run_id_cost", "steps", ["run_id", "cost"])


def downgrade() -> None:
    """Drop both indexes."""
    op.drop_index("ix_steps_run_id_cost", table_name="steps")
    op.drop_index("ix_events_event_node", table_name="events")
