"""checks: exit checks and gate steps run by the loop, and their rows in ``activity``

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

A ``checks`` table (run, iteration, step, command, exit code, duration, signature,
failure count, passed count when parseable, output path), and check rows in
``fractal node activity``. The duration is derived from ``started_at`` and
``ended_at`` like every other row's. The ``activity`` view is dropped and recreated with
one ``check`` row per check; downgrade restores the view of revision 0001.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _initial() -> Any:
    """Revision 0001's module (its view text and ``dialect_view``)."""
    path = Path(__file__).with_name("0001_initial.py")
    spec = importlib.util.spec_from_file_location("fractal_migration_0001", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _base_view() -> str:
    """The ``CREATE VIEW activity`` text of revision 0001 (the view this one extends)."""
    return str(_initial().ACTIVITY_VIEW)


def dialect_view(view: str) -> str:
    """``view`` as the migrating engine takes it (revision 0001's ``dialect_view``)."""
    return str(_initial().dialect_view(view))


# A check row: kind 'check', event 'exit-check' or 'gate', status passed/failed, the
# command (and the signature when it failed) as the reason, its duration; no cost.
CHECK_ROWS = """
UNION ALL
SELECT c.ended_at, c.node, 'check', CASE c.kind WHEN 'gate' THEN 'gate' ELSE 'exit-check' END,
       c.run_id, c.iter_id, i.iter, c.step_id, s.step, s.step_name,
       CASE WHEN c.exit_code = 0 THEN 'passed' ELSE 'failed' END, c.exit_code,
       CASE WHEN c.signature = '' THEN c.command ELSE c.command || ' | ' || c.signature END,
       ROUND((julianday(c.ended_at) - julianday(c.started_at)) * 86400.0, 3), NULL, NULL,
       NULL
  FROM checks c
  LEFT JOIN iterations i ON i.iter_id = c.iter_id
  LEFT JOIN steps s ON s.step_id = c.step_id
"""


def upgrade() -> None:
    """Create ``checks`` and its indexes; recreate ``activity`` with the check rows."""
    op.create_table(
        "checks",
        sa.Column("check_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("iter_id", sa.Integer(), nullable=True),
        sa.Column("step_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("signature", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=True),
        sa.Column("passed", sa.Integer(), nullable=True),
        sa.Column("output_path", sa.Text(), nullable=True),
        sa.Column("started_at", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("check_id", name=op.f("pk_checks")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"],
                                name=op.f("fk_checks_run_id_runs")),
        sa.ForeignKeyConstraint(["iter_id"], ["iterations.iter_id"],
                                name=op.f("fk_checks_iter_id_iterations")),
        sa.ForeignKeyConstraint(["step_id"], ["steps.step_id"],
                                name=op.f("fk_checks_step_id_steps")),
    )
    op.create_index(op.f("ix_checks_node"), "checks", ["node"], unique=False)
    op.create_index(op.f("ix_checks_run_id"), "checks", ["run_id"], unique=False)
    op.execute("DROP VIEW IF EXISTS activity")
    op.execute(dialect_view(_base_view().rstrip() + "\n" + CHECK_ROWS))


def downgrade() -> None:
    """Restore the 0001 ``activity`` view, then drop ``checks``."""
    op.execute("DROP VIEW IF EXISTS activity")
    op.execute(dialect_view(_base_view()))
    op.drop_index(op.f("ix_checks_run_id"), table_name="checks")
    op.drop_index(op.f("ix_checks_node"), table_name="checks")
    op.drop_table("checks")
