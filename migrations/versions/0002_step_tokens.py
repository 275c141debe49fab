"""token usage on steps: input, cached input and output tokens per launch attempt

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

Adds three nullable INTEGER columns to ``steps``: ``input_tokens`` (cached ones
included), ``cached_input_tokens`` (the cached subset) and ``output_tokens``, the
per-invocation token usage an agent CLI reported (codex reports tokens, not
dollars). NULL means the agent reported none. ``fractal.store.schema.HEAD_REVISION``
names the newest revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("input_tokens", "cached_input_tokens", "output_tokens")


def upgrade() -> None:
    """Add the three token columns (plain ALTER TABLE ADD COLUMN; no table rebuild)."""
    for name in COLUMNS:
        op.add_column("steps", sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    """Drop the token columns (SQLite >= 3.35 drops a column the view does not use)."""
    for name in reversed(COLUMNS):
        op.drop_column("steps", name)
