"""initial schema: registry, ledger, events, signals and the activity view

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Creates the six tables of ``fractal.store.models`` with their indexes, and the
``activity`` view (a UNION ALL of run, iteration and step starts and ends plus
events). When a later revision becomes the newest, bump
``fractal.store.schema.HEAD_REVISION``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _text(name: str, *, nullable: bool = True) -> sa.Column[str]:
    return sa.Column(name, sa.Text(), nullable=nullable)


def _int(name: str, *, nullable: bool = True) -> sa.Column[int]:
    return sa.Column(name, sa.Integer(), nullable=nullable)


def _real(name: str) -> sa.Column[float]:
    return sa.Column(name, sa.REAL().with_variant(sa.Double(), "postgresql"), nullable=True)


def _meta() -> sa.Column[str]:
    return sa.Column("metadata", sa.Text(), server_default=sa.text("''"), nullable=False)


def _fk(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    """``table.column`` references the same-named primary key of ``target``."""
    return sa.ForeignKeyConstraint(
        [column], [f"{target}.{column}"], name=op.f(f"fk_{table}_{column}_{target}")
    )


def _pk(table: str, column: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(column, name=op.f(f"pk_{table}"))


def _closing() -> list[sa.Column[Any]]:
    """status, exit_code, metadata, started_at, ended_at: the shape of a ledger row."""
    return [
        _text("status", nullable=False),
        _int("exit_code"),
        _meta(),
        _text("started_at", nullable=False),
        _text("ended_at"),
    ]


# Start rows always read 'active'; end rows carry the duration (julianday diff, s, 3 dp)
# and the cost: the step's own, or the SUM of the steps' costs (NULL when all NULL).
# Integral caps render without a fraction (max_cost $100, as in the COST_BUDGET label).
ACTIVITY_VIEW = """
CREATE VIEW activity AS
SELECT r.started_at AS timestamp, r.node AS node, 'run' AS kind, 'start' AS event,
       r.run_id AS run_id, NULL AS iter_id, NULL AS iter, NULL AS step_id, NULL AS step,
       NULL AS step_name, 'active' AS status, NULL AS exit_code,
       CASE WHEN r.max_cost IS NULL THEN ''
            WHEN r.max_cost = CAST(r.max_cost AS INTEGER)
              THEN 'max_cost $' || CAST(CAST(r.max_cost AS INTEGER) AS TEXT)
            ELSE 'max_cost $' || CAST(r.max_cost AS TEXT) END AS metadata,
       NULL AS duration, NULL AS cost, NULL AS actor, NULL AS event_id
  FROM runs r
UNION ALL
SELECT r.ended_at, r.node, 'run', 'end', r.run_id, NULL, NULL, NULL, NULL, NULL,
       r.status, r.exit_code, r.metadata,
       ROUND((julianday(r.ended_at) - julianday(r.started_at)) * 86400.0, 3),
       (SELECT SUM(s.cost) FROM steps s WHERE s.run_id = r.run_id), NULL, NULL
  FROM runs r WHERE r.ended_at IS NOT NULL
UNION ALL
SELECT i.started_at, i.node, 'iteration', 'start', i.run_id, i.iter_id, i.iter, NULL, NULL,
       NULL, 'active', NULL, '', NULL, NULL, NULL, NULL
  FROM iterations i
UNION ALL
SELECT i.ended_at, i.node, 'iteration', 'end', i.run_id, i.iter_id, i.iter, NULL, NULL, NULL,
       i.status, i.exit_code, i.metadata,
       ROUND((julianday(i.ended_at) - julianday(i.started_at)) * 86400.0, 3),
       (SELECT SUM(s.cost) FROM steps s WHERE s.iter_id = i.iter_id), NULL, NULL
  FROM iterations i WHERE i.ended_at IS NOT NULL
UNION ALL
SELECT s.started_at, s.node, 'step', 'start', s.run_id, s.iter_id, i.iter, s.step_id, s.step,
       s.step_name, 'active', NULL, '', NULL, NULL, NULL, NULL
  FROM steps s LEFT JOIN iterations i ON i.iter_id = s.iter_id
UNION ALL
SELECT s.ended_at, s.node, 'step', 'end', s.run_id, s.iter_id, i.iter, s.step_id, s.step,
       s.step_name, s.status, s.exit_code, s.metadata,
       ROUND((julianday(s.ended_at) - julianday(s.started_at)) * 86400.0, 3), s.cost, NULL, NULL
  FROM steps s LEFT JOIN iterations i ON i.iter_id = s.iter_id WHERE s.ended_at IS NOT NULL
UNION ALL
SELECT e.created_at, e.node, 'event', e.event, e.run_id, e.iter_id, i.iter, e.step_id, s.step,
       s.step_name, e.status, e.exit_code, e.metadata, NULL, NULL, e.actor, e.event_id
  FROM events e
  LEFT JOIN iterations i ON i.iter_id = e.iter_id
  LEFT JOIN steps s ON s.step_id = e.step_id
"""


# On PostgreSQL the two SQLite functions the ledger's SQL uses, so the view and the
# statements stay one text for both engines: julianday(text) (the day number of an ISO
# 8601 instant, as SQLite reads it) and ROUND(double precision, integer) (PostgreSQL
# rounds only numeric to a number of places).
PG_FUNCTIONS = """
CREATE OR REPLACE FUNCTION julianday(instant text) RETURNS double precision
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$ SELECT extract(epoch FROM instant::timestamptz)::double precision / 86400.0
               + 2440587.5 $$;
CREATE OR REPLACE FUNCTION round(value double precision, places integer)
  RETURNS double precision
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$ SELECT round(value::numeric, places)::double precision $$;
"""


# PostgreSQL types a UNION's columns from its arms in order, and a bare NULL in the first
# arm (beside a NULL in the second) would type a column text: there the first arm's
# NULLs carry the column's type. SQLite's view keeps its text as it always was.
_FIRST_ARM_TYPES = {
    "iter_id": "INTEGER", "iter": "INTEGER", "step_id": "INTEGER", "step": "INTEGER",
    "step_name": "TEXT", "exit_code": "INTEGER", "duration": "DOUBLE PRECISION",
    "cost": "DOUBLE PRECISION", "actor": "TEXT", "event_id": "INTEGER",
}


def dialect_view(view: str) -> str:
    """``view`` (a ``CREATE VIEW activity`` text) as the migrating connection's engine
    takes it: unchanged on SQLite, its first arm's NULLs typed on PostgreSQL."""
    if op.get_bind().dialect.name != "postgresql":
        return view
    return re.sub(r"\bNULL AS (\w+)",
                  lambda m: f"CAST(NULL AS {_FIRST_ARM_TYPES[m[1]]}) AS {m[1]}", view)


def upgrade() -> None:
    """Create the registry, ledger, events and signals tables, their indexes, the view."""
    op.create_table(
        "nodes",
        _int("node_id", nullable=False),
        _text("node", nullable=False),
        _text("parent"),
        _text("title"),
        _text("status", nullable=False),
        _text("worktree"),
        _real("max_cost"),
        _int("max_depth"),
        _int("max_children"),
        _int("max_descendants"),
        _text("tmux_session"),
        _text("tmux_socket"),
        _int("supervisor_pid"),
        _real("supervisor_started"),
        _text("created_at", nullable=False),
        _text("updated_at"),
        _pk("nodes", "node_id"),
        sa.UniqueConstraint("node", name=op.f("uq_nodes_node")),
    )
    op.create_table(
        "runs",
        _int("run_id", nullable=False),
        _text("node", nullable=False),
        _int("parent_run_id"),
        _text("agent"),
        _real("max_cost"),
        *_closing(),
        _pk("runs", "run_id"),
        sa.ForeignKeyConstraint(
            ["parent_run_id"], ["runs.run_id"], name=op.f("fk_runs_parent_run_id_runs")
        ),
    )
    op.create_table(
        "iterations",
        _int("iter_id", nullable=False),
        _text("node", nullable=False),
        _int("run_id", nullable=False),
        _int("iter", nullable=False),
        _text("agent"),
        _text("model"),
        _text("session"),
        *_closing(),
        _pk("iterations", "iter_id"),
        _fk("iterations", "run_id", "runs"),
    )
    op.create_table(
        "steps",
        _int("step_id", nullable=False),
        _text("node", nullable=False),
        _int("iter_id"),
        _int("run_id", nullable=False),
        _int("step", nullable=False),
        _text("step_name", nullable=False),
        _text("agent"),
        _text("model"),
        _text("session"),
        _text("status", nullable=False),
        _int("exit_code"),
        _real("cost"),
        _text("approved"),
        _int("pgid"),
        _real("pgid_started"),
        _meta(),
        _text("started_at", nullable=False),
        _text("ended_at"),
        _pk("steps", "step_id"),
        _fk("steps", "iter_id", "iterations"),
        _fk("steps", "run_id", "runs"),
    )
    op.create_table(
        "events",
        _int("event_id", nullable=False),
        _text("node", nullable=False),
        _int("run_id"),
        _int("iter_id"),
        _int("step_id"),
        _text("event", nullable=False),
        _text("actor"),
        _text("status"),
        _int("exit_code"),
        _meta(),
        _text("created_at", nullable=False),
        _pk("events", "event_id"),
        _fk("events", "run_id", "runs"),
        _fk("events", "iter_id", "iterations"),
        _fk("events", "step_id", "steps"),
    )
    op.create_table(
        "signals",
        _int("signal_id", nullable=False),
        _text("node", nullable=False),
        _int("run_id", nullable=False),
        _text("signal", nullable=False),
        _meta(),
        _text("created_at", nullable=False),
        _pk("signals", "signal_id"),
        _fk("signals", "run_id", "runs"),
    )
    for table, column in (
        ("runs", "node"),
        ("runs", "parent_run_id"),
        ("iterations", "run_id"),
        ("steps", "run_id"),
        ("steps", "iter_id"),
        ("events", "node"),
        ("signals", "run_id"),
    ):
        op.create_index(op.f(f"ix_{table}_{column}"), table, [column], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTIONS)
    op.execute(dialect_view(ACTIVITY_VIEW))


def downgrade() -> None:
    """Drop the view, then the tables (and with them their indexes), children first."""
    op.execute("DROP VIEW IF EXISTS activity")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS julianday(text); "
                   "DROP FUNCTION IF EXISTS round(double precision, integer)")
    for table in ("signals", "events", "steps", "iterations", "runs", "nodes"):
        op.drop_table(table)
