"""``fractal wiki update``: regenerate the wikis' ``_index.md`` files."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import IN_WORKTREE, path_option, verb_context


@click.group("wiki")
def wiki_group() -> None:
    """Maintain the project wiki (wiki/) and the node's memory wiki (memory/)."""


@wiki_group.command("update")
@click.argument("directory", required=False,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@path_option(IN_WORKTREE)
def update_cmd(directory: Path | None, path: Path) -> None:
    """Regenerate DIRECTORY's index (default: the project and memory wikis of the node
    whose worktree holds --path); print each index path that changed."""
    # deferred: only this command needs it (16 modules)
    from fractal.lifecycle.wikis import update_wikis

    for result in update_wikis(None if directory is not None else verb_context(path),
                               directory):
        state = "updated" if result.changed else "up to date"
        click.echo(f"{result.index}: {state} ({result.pages} page(s))", err=True)
        if result.changed:
            click.echo(result.index)
