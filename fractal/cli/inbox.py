"""``fractal inbox``: everything in the tree that waits for a human."""

from __future__ import annotations

import json
from pathlib import Path

import click

from fractal.cli.context import IN_REPOSITORY, path_option, verb_context
from fractal.cli.format import notice

PATH_OPTION = path_option(IN_REPOSITORY)


@click.group("inbox", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option("--all", "include_acked", is_flag=True,
              help="Include acknowledged items (marked).")
@PATH_OPTION
@click.pass_context
def inbox_group(ctx: click.Context, as_json: bool, include_acked: bool, path: Path) -> None:
    """List what waits for a human, oldest first, each with the command that resolves it:
    pending gates, exited runs, budget landings, no-progress stops, interrupted and
    paused nodes, stalls, usage-window and provider-outage waits, merges that did not
    land, children left running at their parent's end, unread messages to the operator,
    top-level nodes ready to merge. What a running lead can act on waits for it first
    (the root config's inbox_grace, default 10m); stderr says what is held."""
    if ctx.invoked_subcommand is not None:
        return
    from fractal.domain.sandbox import Mode, mode_of  # deferred: start-up cost (1 module)

    # deferred: start-up cost (29 modules)
    from fractal.lifecycle.inbox import held_line, hold_grace, inbox_and_held

    vctx = verb_context(path)
    entries, held = inbox_and_held(vctx, include_acked=include_acked)
    if as_json:
        click.echo(json.dumps([e.as_row() for e in entries], indent=2))
        return
    if mode_of(vctx.tree.root_config()) is Mode.OFF:
        notice('the tree runs its agents unsandboxed ("sandbox": "off" in '
               f'.fractal/{vctx.tree.root}/config.json; docs/security.md)')
    if not entries:
        click.echo("nothing waits for you", err=True)
    for entry in entries:
        row = entry.as_row()
        mark = " (acked)" if entry.acked else ""
        click.echo(f"{row['id']}  {row['since']}  {row['kind']:<11} {row['node']}{mark}\n"
                   f"    {row['summary']}\n    -> {row['command']}")
    if held:
        click.echo(held_line(held, hold_grace(vctx.tree)), err=True)


@inbox_group.command("ack")
@click.argument("item_id", metavar="ID")
@PATH_OPTION
def ack_cmd(item_id: str, path: Path) -> None:
    """Hide item ID until its state changes (a new run, another gate, ...)."""
    from fractal.lifecycle.inbox import ack  # deferred: only this command needs it (28 modules)

    entry = ack(verb_context(path), item_id)
    click.echo(f"acknowledged {entry.item.id} ({entry.item.kind.value} {entry.item.node}); "
               "it returns if its state changes", err=True)


@click.command("_notify", hidden=True)
@path_option(None, required=True)
@click.option("--once", is_flag=True, help="Dispatch once and exit (no watching).")
def notify_cmd(path: Path, once: bool) -> None:
    """The tree's notify watcher (started by the verbs that host a supervisor)."""
    import logging  # deferred: start-up cost (6 modules)

    # deferred: only this command needs it (14 modules)
    from fractal.lifecycle.notify import dispatch, watch
    from fractal.tree import find_tree  # deferred: only this command needs it (6 modules)

    tree = find_tree(path)
    logging.basicConfig(filename=tree.data_dir / "notify.log", level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if once:
        dispatch(tree)
        return
    watch(tree)


@inbox_group.command("notify")
@click.argument("command", required=False)
@click.option("--events", default=None, metavar="KINDS",
              help="Comma-separated kinds to notify (gate, exited, budget, no-progress, "
                   "interrupted, paused, stall, usage, outage, merge, orphans, message); '' "
                   "for every kind.")
@click.option("--off", is_flag=True, help="Remove the notify command.")
@PATH_OPTION
def notify_set_cmd(command: str | None, events: str | None, off: bool, path: Path) -> None:
    """Show or set the tree's notify COMMAND (run for each batch of new inbox items)."""
    # deferred: only this command needs it (14 modules)
    from fractal.lifecycle.notify import configure

    setting = configure(verb_context(path), command, events, off=off)
    click.echo(f"notify: {setting.command or '(off)'}")
    click.echo(f"notify_events: {setting.events or '(every kind)'}")
