"""The ``activity`` view's run and iteration costs read unknown when every cost is unknown

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

A run or iteration end row summed its steps' costs, and steps that never launched (a gate
check, a step the budget would not pay for) record a known 0.0, so a run whose only agent
step reported no cost read ``0``. The end rows now read NULL (unknown) when launched steps
ended without a cost and none recorded one, else the sum of the known costs: the rule of
``fractal node cost spent``. The rule reads ``pgid`` and ``ended_at`` too, so the index
a run's spend is read from (0014's ``(run_id, cost)``) gains those two columns.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KNOWN = ("CASE WHEN COUNT(CASE WHEN s.cost IS NOT NULL AND s.pgid IS NOT NULL THEN 1 END) = 0 "
          "AND COUNT(CASE WHEN s.cost IS NULL AND s.pgid IS NOT NULL "
          "AND s.ended_at IS NOT NULL THEN 1 END) > 0 THEN NULL ELSE SUM(s.cost) END")
_RUN_SUM = "(SELECT SUM(s.cost) FROM steps s WHERE s.run_id = r.run_id)"
_ITER_SUM = "(SELECT SUM(s.cost) FROM steps s WHERE s.iter_id = i.iter_id)"


def _view_0012() -> str:
    """The ``CREATE VIEW activity`` text of revision 0012 (the view this one rewrites)."""
    path = Path(__file__).with_name("0012_check_scores.py")
    spec = importlib.util.spec_from_file_location("fractal_migration_0012", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    view_0004 = str(module._view_0004())
    return view_0004.replace(str(module._EXIT_ONLY), str(module._WITH_SCORE))


def upgrade() -> None:
    """Recreate ``activity`` with the unknown-aware run and iteration costs; widen the
    spend index."""
    view = _view_0012()
    assert _RUN_SUM in view and _ITER_SUM in view, "the view changed; update this migration"
    view = view.replace(_RUN_SUM, f"(SELECT {_KNOWN} FROM steps s WHERE s.run_id = r.run_id)")
    view = view.replace(_ITER_SUM, f"(SELECT {_KNOWN} FROM steps s WHERE s.iter_id = i.iter_id)")
    op.execute("DROP VIEW IF EXISTS activity")
    op.execute(view)
    op.drop_index("ix_steps_run_id_cost", table_name="steps")
    op.create_index("ix_steps_run_spend", "steps", ["run_id", "cost", "pgid", "ended_at"])


def downgrade() -> None:
    """Restore the 0012 ``activity`` view and 0014's spend index."""
    op.drop_index("ix_steps_run_spend", table_name="steps")
    op.create_index("ix_steps_run_id_cost", "steps", ["run_id", "cost"])
    op.execute("DROP VIEW IF EXISTS activity")
    op.execute(_view_0012())
