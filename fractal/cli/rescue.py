"""``fractal rescue list|restore``: the rescue refs written before destructive verbs."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import PATH_OPTION
from fractal.cli.format import format_options, output_format, render_rows

_COLUMNS = ["ref", "node", "operation", "files", "created", "sha"]


@click.group("rescue")
def rescue_group() -> None:
    """List and restore the rescue refs fractal writes before it destroys anything."""


@rescue_group.command("list")
@format_options
@PATH_OPTION
def list_cmd(as_json: bool, as_csv: bool, path: Path) -> None:
    """Every rescue ref, oldest first, with the verb that wrote it."""
    # deferred: only this command needs it (33 modules)
    from fractal.lifecycle.rescuing import list_rescues

    rows = [{"ref": r.ref, "node": r.node, "operation": r.operation or "", "files": r.files,
             "created": r.created_at or r.stamp, "sha": r.sha} for r in list_rescues(path)]
    click.echo(render_rows(rows, _COLUMNS, fmt=output_format(as_json, as_csv)))


@rescue_group.command("restore")
@click.argument("ref")
@click.option("--as", "as_name", default=None, metavar="NAME",
              help="Register a fresh node NAME (under the caller's node) from the rescue.")
@click.option("--branch", default=None,
              help="Branch name to create (default: rescued/<node>/<stamp>); ignored with --as.")
@PATH_OPTION
def restore_cmd(ref: str, as_name: str | None, branch: str | None, path: Path) -> None:
    """Make a branch (or, with --as, a node) from rescue REF (full, or after refs/fractal/rescue/)."""
    # deferred: only this command needs it (33 modules)
    from fractal.lifecycle.rescuing import restore_rescue

    restored = restore_rescue(path, ref, as_name=as_name, branch=branch)
    click.echo(restored.branch)
    what = f"node {restored.node}" if restored.node else f"branch {restored.branch}"
    click.echo(f"restored {restored.ref} as {what} at {restored.sha[:12]}", err=True)
    for line in restored.reset:
        click.echo(f"warning: {line}", err=True)
