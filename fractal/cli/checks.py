"""``fractal node checks``: list the checks a node's loop ran (docs/checks.md)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from fractal.cli.context import PATH_OPTION, verb_context
from fractal.cli.format import output_format, render_rows

_JSON_EXTRA = ["check_id", "run_id", "iter_id", "step_id", "started_at", "ended_at"]


@click.command("checks")
@click.argument("node", required=False)
@click.option("--run", "run", type=click.IntRange(min=1), default=None,
              help="Only the checks of run N.")
@click.option("--json", "as_json", is_flag=True,
              help='Print JSON: {"node", "checks": [...], "trend": [...]}.')
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (the rows only).")
@PATH_OPTION
def checks_cmd(node: str | None, run: int | None, as_json: bool, as_csv: bool,
               path: Path) -> None:
    """Exit checks and gate steps NODE's loop ran, oldest first, then (in a table) the
    trend of failing counts per iteration."""
    # deferred: only this command needs it (11 modules)
    from fractal.lifecycle.reads.checks import CHECK_COLUMNS, node_checks

    fmt = output_format(as_json, as_csv) or ("table" if sys.stdout.isatty() else "csv")
    report = node_checks(verb_context(path), node, run)
    if fmt == "json":
        click.echo(json.dumps({
            "node": report.node,
            "checks": [{c: row.get(c) for c in [*CHECK_COLUMNS, *_JSON_EXTRA]}
                       for row in report.rows],
            "trend": [asdict(point) for point in report.trend],
        }, indent=2))
        return
    click.echo(render_rows(report.rows, CHECK_COLUMNS, fmt=fmt))
    if fmt == "table" and report.trend:
        click.echo("")
        click.echo(report.trend_line())
