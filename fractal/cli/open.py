"""``fractal open``: the live dashboard of the whole tree (Textual, imported only here),
in this terminal or, with ``--web``, served to a browser (textual-serve, imported only
for ``--web``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from fractal.cli.context import IN_REPOSITORY, path_option

if TYPE_CHECKING:
    from fractal.tree import Tree


@click.command("open")
@click.argument("node", required=False)
@click.option("--web", is_flag=True,
              help="Serve the dashboard to a browser instead; prints the URL to open.")
@click.option("--port", default=None, metavar="N",
              help="With --web: the port (default 8765; 0: any free port).")
@click.option("--bind", default=None, metavar="ADDR",
              help="With --web: listen on ADDR instead of 127.0.0.1 (the URL's token is "
                   "still required).")
@path_option(IN_REPOSITORY)
def open_cmd(node: str | None, web: bool, port: str | None, bind: str | None,
             path: Path) -> None:
    """Open the live dashboard: the tree, the selected node, the inbox and the radio.

    NODE (optional) is selected first. Press ? inside for the keys; q quits. With --web
    the same dashboard is served to a browser at a URL carrying an access token.
    """
    import os
    import sys

    from fractal.cli.context import verb_context
    from fractal.errors import FractalError

    if not web and (port is not None or bind is not None):
        raise click.UsageError("--port and --bind go with --web: "
                               "`fractal open --web --port N`")
    # Under textual-serve (TEXTUAL_DRIVER set) the app talks to the browser over pipes.
    if not web and not sys.stdout.isatty() and "TEXTUAL_DRIVER" not in os.environ:
        raise FractalError("fractal open needs a terminal; for a text view use "
                           "`fractal node list --tree` or `fractal inbox`, or serve it "
                           "to a browser with `fractal open --web`")
    ctx = verb_context(path)
    tree, branch = ctx.tree, ctx.subtree(node)
    selected = None if branch == tree.root else branch
    if web:
        _serve(tree, selected, port, bind)
        return
    from fractal.tui.app import run_dashboard

    run_dashboard(tree, selected)


def _serve(tree: Tree, node: str | None, port: str | None, bind: str | None) -> None:
    """``--web``: check the address and port, open the socket, print the URL (stdout)
    and the notices (stderr), then serve until interrupted."""
    import os

    from fractal.domain import webaccess
    from fractal.errors import FractalError
    try:
        listen = webaccess.listen_on(bind)
        number = webaccess.port_number(port) if port is not None \
            else webaccess.DEFAULT_PORT
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        from fractal.tui import web
    except ImportError as exc:  # the optional extra is not installed
        raise FractalError(f"fractal open --web needs textual-serve ({exc}); install the "
                           f"web extra: pip install 'fractal[web]'") from None
    sock = web.open_socket(listen, number)
    token = os.urandom(16).hex()
    url = web.page_url(listen, sock, token)
    click.echo(url)
    notice = webaccess.bind_notice(listen, url)
    if notice:
        click.echo(f"fractal open --web: {notice}", err=True)
    click.echo("fractal open --web: serving the dashboard (each browser gets its own, acting "
               "as you); Ctrl+C stops it", err=True)

    def say(line: str) -> None:
        click.echo(f"fractal open --web: {line}", err=True)

    web.serve(tree, node, listen, sock, token, say=say)
