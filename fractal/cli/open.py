"""``fractal open``: the live dashboard of the whole tree (Textual, imported only here)."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import IN_REPOSITORY, path_option


@click.command("open")
@click.argument("node", required=False)
@path_option(IN_REPOSITORY)
def open_cmd(node: str | None, path: Path) -> None:
    """Open the live dashboard: the tree, the selected node, the inbox and the radio.

    NODE (optional) is selected first. Press ? inside for the keys; q quits.
    """
    import sys

    from fractal.cli.context import verb_context
    from fractal.errors import FractalError

    if not sys.stdout.isatty():
        raise FractalError("fractal open needs a terminal; for a text view use "
                           "`fractal node list --tree` or `fractal inbox`")
    ctx = verb_context(path)
    tree, branch = ctx.tree, ctx.subtree(node)
    from fractal.tui.app import run_dashboard

    run_dashboard(tree, None if branch == tree.root else branch)
