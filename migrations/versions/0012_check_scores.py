"""checks.score: the score a check reported; a check red on its score reads failed

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

A gate step or exit check may end its output with a score in [0, 1]; the loop keeps it
on the check's row (NULL when the check reported none) for the score trend and the
stagnation track a resumed run rebuilds. A check that exited 0 below its threshold has a
signature, so the ``activity`` view's check rows now read ``passed`` only at exit 0 with
an empty signature (every earlier row reads as before: exit 0 always had an empty one).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_EXIT_ONLY = "CASE WHEN c.exit_code = 0 THEN 'passed' ELSE 'failed' END"
_WITH_SCORE = "CASE WHEN c.exit_code = 0 AND c.signature = '' THEN 'passed' ELSE 'failed' END"


def _checks() -> Any:
    """Revision 0004's module."""
    path = Path(__file__).with_name("0004_checks.py")
    spec = importlib.util.spec_from_file_location("fractal_migration_0004", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _view_0004() -> str:
    """The ``CREATE VIEW activity`` text of revision 0004 (base view plus check rows), as
    the migrating engine takes it (``dialect_view``)."""
    module = _checks()
    return str(module.dialect_view(str(module._base_view()).rstrip() + "\n"
                                   + str(module.CHECK_ROWS)))


def upgrade() -> None:
    """Add the nullable ``checks.score`` column; recreate ``activity`` with the
    signature-aware check status."""
    op.add_column("checks", sa.Column(
        "score", sa.REAL().with_variant(sa.Double(), "postgresql"), nullable=True))
    view = _view_0004()
    assert _EXIT_ONLY in view, "the 0004 check rows changed; update this migration"
    op.execute("DROP VIEW IF EXISTS activity")
    op.execute(view.replace(_EXIT_ONLY, _WITH_SCORE))


def downgrade() -> None:
    """Restore the 0004 ``activity`` view, then drop ``checks.score`` (SQLite's own DROP
    COLUMN: a batch rebuild of ``checks`` would break the view that reads it)."""
    op.execute("DROP VIEW IF EXISTS activity")
    op.execute(_view_0004())
    op.drop_column("checks", "score")
