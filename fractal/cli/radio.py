"""``fractal radio messages``: read the notices nodes post to their outbox."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.format import format_options, output_format, render_rows


@click.group("radio")
def radio_group() -> None:
    """Read the notices nodes post (every exited run posts one to its outbox)."""


@radio_group.command("messages")
@click.option("--node", "node", default=None, help="Only this node's messages.")
@click.option("--channel", default="outbox", show_default=True, help="The channel to read.")
@click.option("--limit", type=click.IntRange(min=1, max=10**9), default=None,
              help="At most N messages.")
@format_options
@click.option("--path", "path", default=".", type=click.Path(file_okay=False, path_type=Path),
              help="A directory inside the repository (default: the current one).")
def messages_cmd(node: str | None, channel: str, limit: int | None, as_json: bool,
                 as_csv: bool, path: Path) -> None:
    """List messages, newest first (--json adds each message's body, ``data``)."""
    from fractal.lifecycle.reads import messages

    rows = messages(path, node, channel, limit)
    fmt = output_format(as_json, as_csv)
    columns = ["created_at", "node", "channel", "priority", "subject", "uuid"]
    if fmt == "json":  # the body (e.g. a budget notice's spend figures) only here
        columns.append("data")
    click.echo(render_rows(rows, columns, fmt=fmt))
