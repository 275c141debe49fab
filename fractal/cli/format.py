"""Render rows for stdout: a table on a terminal, CSV when piped, or JSON on request.

stdout carries only data; notices go to stderr (DESIGN: rules of the house).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from fractal.domain.termtext import terminal_text

Row = Mapping[str, object]


def cell(value: object) -> str:
    """``value`` as a table or CSV cell; text as ``terminal_text`` leaves it (a node wrote
    it: no escape sequence reaches a terminal through a pipe either)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value else "0"
    return terminal_text(str(value))


def render_rows(rows: Sequence[Row], columns: Sequence[str], *, fmt: str | None = None) -> str:
    """Render ``rows`` (dicts keyed by ``columns``) as ``table``, ``csv`` or ``json``.

    ``fmt`` None picks table on a TTY and CSV otherwise. Empty listings still print
    the header (table/csv) or ``[]`` (json).
    """
    if fmt is None:
        fmt = "table" if sys.stdout.isatty() else "csv"
    if fmt == "json":
        import json

        return json.dumps([{c: row.get(c) for c in columns} for row in rows], indent=2)
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([cell(row.get(c)) for c in columns])
        return buf.getvalue().rstrip("\n")
    from tabulate import tabulate

    body = [[cell(row.get(c)) for c in columns] for row in rows]
    return tabulate(body, headers=list(columns), tablefmt="simple", disable_numparse=True)


JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
"""``--json`` (parameter ``as_json``) for a command whose output has no CSV form."""
CSV_OPTION = click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
"""``--csv`` (parameter ``as_csv``); a listing takes it with ``--json``: ``format_options``."""


def format_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` and ``--csv`` flags (parameters ``as_json``, ``as_csv``) for a listing."""
    return JSON_OPTION(CSV_OPTION(func))


def limit_option(things: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--limit N`` (parameter ``limit``: a whole number from 1, None when not given),
    helped as ``At most N <things>.``"""
    return click.option("--limit", type=click.IntRange(min=1, max=10**9), default=None,
                        help=f"At most N {things}.")


def output_format(as_json: bool, as_csv: bool) -> str | None:
    """Resolve ``--json``/``--csv`` (mutually exclusive) to a format name or None (auto)."""
    if as_json and as_csv:
        raise click.UsageError("--json and --csv are mutually exclusive")
    return "json" if as_json else "csv" if as_csv else None


def notice(text: str) -> None:
    """A notice on stderr."""
    click.echo(text, err=True)
