"""the provider_outages table: one provider outage per credential while it lasts

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

A launch that fails with a transient API error (overloaded, a 5xx, a refused
connection) puts its node in a provider-outage wait with a doubling back-off; every node
on the same credential waits on this row too, and one probe launch at the wake instant
finds out whether the provider is back (see ``fractal.store.outages``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``provider_outages``."""
    op.create_table(
        "provider_outages",
        sa.Column("credential", sa.Text(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("wake_at", sa.REAL().with_variant(sa.Double(), "postgresql"), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("prober", sa.Text(), nullable=True),
        sa.Column("probe_started", sa.REAL().with_variant(sa.Double(), "postgresql"), nullable=True),
        sa.Column("closed_by", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("credential", name=op.f("pk_provider_outages")),
    )


def downgrade() -> None:
    """Drop ``provider_outages``."""
    op.drop_table("provider_outages")
