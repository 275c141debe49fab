"""``node activity --follow``: render each batch of new rows as it arrives.

One line per row: a JSON object per line with ``--json``, CSV (header once) with
``--csv`` or when piped, and aligned text on a terminal. It ends by itself once a
followed node's run is over (see ``lifecycle.reads.follow``); Ctrl-C ends it with exit 0.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from fractal.cli.context import verb_context
from fractal.cli.format import cell

FOLLOW_BACKLOG = 10  # rows shown before following, when --limit is not given
_WIDTHS = {"timestamp": 24, "node": 16, "kind": 9, "event": 8, "ref": 6, "step": 12,
           "status": 9, "exit": 4, "duration": 8, "cost": 7}


def stream_activity(path: Path, node: str | None, limit: int | None, fmt: str | None,
                    columns: Sequence[str]) -> None:
    """Follow the activity of ``node`` and write rows to stdout until its run is over (one
    node) or until interrupted."""
    # deferred: start-up cost (24 modules)
    from fractal.lifecycle.reads.follow import follow_activity

    fmt = fmt or ("table" if sys.stdout.isatty() else "csv")
    writer = csv.writer(sys.stdout, lineterminator="\n")
    if fmt == "csv":
        writer.writerow(columns)
    try:
        for batch in follow_activity(verb_context(path), node, limit or FOLLOW_BACKLOG):
            for row in batch:
                if fmt == "json":
                    click.echo(json.dumps({c: row.get(c) for c in columns}))
                elif fmt == "csv":
                    writer.writerow([cell(row.get(c)) for c in columns])
                else:
                    click.echo(" ".join(cell(row.get(c)).ljust(_WIDTHS.get(c, 0))
                                        for c in columns).rstrip())
            sys.stdout.flush()
    except KeyboardInterrupt:
        return
