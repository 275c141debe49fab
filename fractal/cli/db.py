"""``fractal db``: the tree's ledger itself; ``copy-to URL`` moves it to PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import IN_REPOSITORY, path_option, verb_context


@click.group("db")
def db_group() -> None:
    """The tree's ledger: copy it from SQLite into PostgreSQL."""


@db_group.command("copy-to")
@click.argument("url")
@path_option(IN_REPOSITORY)
def copy_to_cmd(url: str, path: Path) -> None:
    """Copy the tree's SQLite ledger into the empty PostgreSQL database URL, then use it.

    The tree must be braked (`fractal pause`) with no node active. The target is migrated
    to the newest schema, every row is copied with its id, the id sequences are moved past
    the copied ids and each table's row count is checked; then the root's config.json
    names URL (without any password: put that in ~/.pgpass or PGPASSWORD). The SQLite
    file is kept unchanged, as a backup.
    """
    from fractal.lifecycle.dbcopy import copy_to  # deferred: only this command needs it

    done = copy_to(verb_context(path), url)
    for table, count in done.tables:
        click.echo(f"{table:<18} {count} row(s)")
    rows = sum(count for _, count in done.tables)
    click.echo(f"copied: {rows} row(s) in {len(done.tables)} table(s) to {done.url}; the tree "
               f"now uses it. The SQLite ledger is kept unchanged at {done.backup} (a backup; "
               "`fractal resume` lifts the brake)", err=True)
