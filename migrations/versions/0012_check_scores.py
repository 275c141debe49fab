"""checks.score: the score a check reported

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

A gate step or exit check may end its output with a score in [0, 1]; the loop keeps it
on the check's row (NULL when the check reported none) for the score trend and the
stagnation track a resumed run rebuilds.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the nullable ``checks.score`` column."""
    op.add_column("checks", sa.Column("score", sa.REAL(), nullable=True))


def downgrade() -> None:
    """Drop ``checks.score`` (SQLite's own DROP COLUMN: a batch rebuild of ``checks``
    would break the ``activity`` view that reads it)."""
    op.drop_column("checks", "score")
