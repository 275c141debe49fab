"""``fractal radio ...``: send, post, list, read, answer and withdraw messages between
nodes (see ``docs/radio.md``). The verbs are ``fractal.lifecycle.radio``'s; this module
parses options and renders: listings as a table, CSV or JSON, read messages as text."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from fractal.cli.context import IN_WORKTREE, path_option, verb_context
from fractal.cli.format import JSON_OPTION, format_options, limit_option, output_format, render_rows
from fractal.domain.termtext import terminal_text

PATH_OPTION = path_option(IN_WORKTREE)
PRIORITY = click.IntRange(min=0, max=10)
LIMIT = limit_option("messages")
READ_NODE = click.option("--node", default=None,
                         help="Read this node's channel (default: your own).")
BODY = click.option("--body", is_flag=True, help="Add each message's body (data).")
SINCE = click.option("--since", default=None, metavar="WHEN",
                     help="Only messages this recent: a duration (30m, 2h) or a UTC time.")
COLUMNS = ["created_at", "node", "channel", "sender", "priority", "subject", "uuid"]


@click.group("radio")
def radio_group() -> None:
    """Message other nodes and read the notices the loop posts (run ends, gates, merges)."""


def _data(text: str) -> str:
    """DATA as given, or standard input for ``-``: at most one character past the body
    cap (64 KiB of UTF-8) is read, since a body that long is refused whatever follows,
    so an endless or huge input is refused without being held in memory whole (as "more
    than" the cap: its real size is never read). Raises InvalidValue for that."""
    from fractal.domain.radio import MAX_BODY_BYTES, check_body

    if text != "-":
        return text
    data = sys.stdin.read(MAX_BODY_BYTES + 1)
    if len(data) > MAX_BODY_BYTES:  # cut short: more characters than the cap has bytes
        check_body(data, whole=False)
    return data


def _listing(rows: Sequence[dict[str, object]], as_json: bool, as_csv: bool, body: bool,
             extra: Sequence[str] = ()) -> None:
    fmt = output_format(as_json, as_csv)
    columns = [*COLUMNS, *extra]
    if body or fmt == "json":  # JSON always carries each body (``data``)
        columns.append("data")
    click.echo(render_rows(rows, columns, fmt=fmt))


def _blocks(rows: Sequence[dict[str, object]], as_json: bool, empty: str) -> None:
    """Messages as text, one block each (or JSON)."""
    if as_json:
        click.echo(render_rows(rows, [*COLUMNS, "reply_to", "data"], fmt="json"))
        return
    if not rows:
        click.echo(empty, err=True)
        return
    for i, m in enumerate(rows):  # node-written text: never an escape sequence, piped too
        if i:
            click.echo("")
        answer = f", re {m['reply_to']}" if m.get("reply_to") else ""
        click.echo(terminal_text(f"[{m['uuid']}] {m['created_at']} from {m['sender']} to "
                                 f"{m['node']} {m['channel']} (priority {m['priority']}"
                                 f"{answer})"))
        click.echo(terminal_text(f"Subject: {m['subject']}"))
        data = str(m.get("data") or "")
        if data:
            click.echo("")
            click.echo(terminal_text(data.rstrip("\n")))


@radio_group.command("send")
@click.argument("data")
@click.option("--node", default=None, help="Deliver to this node.")
@click.option("--parent", "to_parent", is_flag=True, help="Deliver to the caller's parent.")
@click.option("--channel", default=None, help="The target's channel (default inbox).")
@click.option("--subject", required=True, help="A one-line subject.")
@click.option("--priority", type=PRIORITY, required=True, help="0 (lowest) to 10 (most urgent).")
@PATH_OPTION
def send_cmd(data: str, node: str | None, to_parent: bool, channel: str | None, subject: str,
             priority: int, path: Path) -> None:
    """Send DATA (`-` reads standard input) to a node's inbox; print the message id."""
    from fractal.lifecycle.radio import send

    click.echo(send(verb_context(path), _data(data), node=node, to_parent=to_parent,
                    channel=channel, subject=subject, priority=priority))


@radio_group.command("post")
@click.argument("data")
@click.option("--node", default=None, help="Post to this node's public channel.")
@click.option("--channel", default=None,
              help="The channel (default: your outbox, or the node's public).")
@click.option("--subject", default=None, help="A one-line subject (default: DATA's first line).")
@click.option("--priority", type=PRIORITY, default=5, show_default=True,
              help="0 (lowest) to 10 (most urgent).")
@PATH_OPTION
def post_cmd(data: str, node: str | None, channel: str | None, subject: str | None,
             priority: int, path: Path) -> None:
    """Publish DATA (`-` reads standard input) to your outbox; print the message id."""
    from fractal.lifecycle.radio import post

    click.echo(post(verb_context(path), _data(data), node=node, channel=channel, subject=subject,
                    priority=priority))


@radio_group.command("messages")
@READ_NODE
@click.option("--channel", default=None, help="public, private, inbox (default) or outbox.")
@click.option("--all", "state", flag_value="all", help="Read and unread messages.")
@click.option("--read", "state", flag_value="read", help="Only messages you have read.")
@click.option("--saved", "state", flag_value="saved", help="Only messages you saved.")
@LIMIT
@SINCE
@format_options
@BODY
@PATH_OPTION
def messages_cmd(node: str | None, channel: str | None, state: str | None, limit: int | None,
                 since: str | None, as_json: bool, as_csv: bool, body: bool,
                 path: Path) -> None:
    """List a channel's messages you have not read yet, newest first."""
    from fractal.lifecycle.radio import messages
    from fractal.store.radio_reads import ReadState

    rows = messages(verb_context(path), node=node, channel=channel,
                    state=ReadState(state or "unread"), limit=limit, since=since)
    _listing(rows, as_json, as_csv, body)


@radio_group.command("read")
@click.argument("uuids", nargs=-1)
@READ_NODE
@click.option("--channel", default=None, help="Without UUIDs: the channel (default inbox).")
@JSON_OPTION
@PATH_OPTION
def read_cmd(uuids: tuple[str, ...], node: str | None, channel: str | None, as_json: bool,
             path: Path) -> None:
    """Show messages with their bodies and mark them read (no UUID: every unread one)."""
    from fractal.lifecycle.radio import read

    _blocks(read(verb_context(path), uuids, node=node, channel=channel), as_json,
            "no unread messages")


@radio_group.command("reply")
@click.argument("uuid")
@click.argument("data")
@click.option("--priority", type=PRIORITY, default=None,
              help="0-10 (default: the original's).")
@PATH_OPTION
def reply_cmd(uuid: str, data: str, priority: int | None, path: Path) -> None:
    """Answer message UUID with DATA (`-` reads standard input); print the reply's id."""
    from fractal.lifecycle.radio import reply

    click.echo(reply(verb_context(path), uuid, _data(data), priority=priority))


@radio_group.command("thread")
@click.argument("uuid")
@JSON_OPTION
@PATH_OPTION
def thread_cmd(uuid: str, as_json: bool, path: Path) -> None:
    """Show the thread message UUID belongs to, oldest first."""
    from fractal.lifecycle.radio import thread

    _blocks(thread(verb_context(path), uuid), as_json, "no messages")


@radio_group.command("feed")
@click.option("--node", default=None, help="Whose descendants (default: yours).")
@LIMIT
@SINCE
@format_options
@BODY
@PATH_OPTION
def feed_cmd(node: str | None, limit: int | None, since: str | None, as_json: bool,
             as_csv: bool, body: bool, path: Path) -> None:
    """The public and outbox posts of every node below yours (at the root: the tree's)."""
    from fractal.lifecycle.radio import feed

    _listing(feed(verb_context(path), node=node, limit=limit, since=since), as_json, as_csv, body)


@radio_group.command("sent")
@LIMIT
@SINCE
@format_options
@BODY
@PATH_OPTION
def sent_cmd(limit: int | None, since: str | None, as_json: bool, as_csv: bool, body: bool,
             path: Path) -> None:
    """What you sent or posted, newest first, with who has read each."""
    from fractal.lifecycle.radio import sent

    _listing(sent(verb_context(path), limit=limit, since=since), as_json, as_csv, body,
             extra=["read_by"])


@radio_group.command("unsend")
@click.argument("uuid")
@click.option("-f", "--force", is_flag=True, help="Withdraw it even though it was read.")
@PATH_OPTION
def unsend_cmd(uuid: str, force: bool, path: Path) -> None:
    """Withdraw a message you sent (kept in the database, listed nowhere)."""
    from fractal.lifecycle.radio import unsend

    row = unsend(verb_context(path), uuid, force=force)
    click.echo(f"withdrew {row['uuid']} ({row['subject']})", err=True)


def _mark(saved: bool) -> Any:
    def command(uuid: str, path: Path) -> None:
        from fractal.lifecycle.radio import save

        changed = save(verb_context(path), uuid, saved=saved)
        state = "saved" if saved else "unsaved"
        click.echo(f"{state} {uuid}" if changed else f"{uuid} was {state} already", err=True)

    return command


radio_group.command("save", help="Keep message UUID at hand (`messages --saved`).")(
    click.argument("uuid")(PATH_OPTION(_mark(True))))
radio_group.command("unsave", help="Drop message UUID from your saved messages.")(
    click.argument("uuid")(PATH_OPTION(_mark(False))))
