"""``fractal usage``: list the tree's usage windows; reopen one (operator only)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from fractal.cli.context import IN_REPOSITORY, path_option, verb_context

PATH_OPTION = path_option(IN_REPOSITORY)


@click.group("usage")
def usage_group() -> None:
    """The tree's usage windows, one per credential (agents.md, "Usage windows")."""


@usage_group.command("list")
@PATH_OPTION
def list_cmd(path: Path) -> None:
    """Print every credential's window: fingerprint, window, state, wake instant (UTC),
    the node that closed or probes it."""
    # deferred: only this command needs it (10 modules)
    from fractal.domain.usage.windows import until_label
    from fractal.lifecycle.usage import windows  # deferred: only this command needs it (39 modules)

    rows = windows(verb_context(path))
    if not rows:
        click.echo("no usage window has closed in this tree", err=True)
        return
    now = time.time()
    for row in rows:
        state = row.state.value
        if state == "closed":
            state = f"closed until {until_label(row.wake_at, now)}"
        elif state == "probing" and row.prober:
            state = f"probing by {row.prober}"
        click.echo(f"{row.credential}  {row.window:<10} {state}")


@usage_group.command("reopen")
@click.argument("credential")
@PATH_OPTION
def reopen_cmd(credential: str, path: Path) -> None:
    """Let the nodes waiting on CREDENTIAL's closed window probe it now (operator only).

    CREDENTIAL is the window's fingerprint as `fractal usage list` prints it, or a prefix
    naming one. One waiting node launches at once as the probe; the others follow when it
    gets through. A window open or being probed is left as it is.
    """
    # deferred: only this command needs it (10 modules)
    from fractal.domain.usage.windows import utc_label
    from fractal.lifecycle.usage import reopen  # deferred: only this command needs it (39 modules)

    done = reopen(verb_context(path), credential)
    row = done.before
    if not done.changed:
        how = f"being probed by {row.prober}" if row.state.value == "probing" else "open"
        click.echo(f"usage window {row.credential} ({row.window}) is {how}: nothing to reopen",
                   err=True)
        return
    click.echo(f"usage window {row.credential} ({row.window}) reopened for a probe (it was "
               f"closed until {utc_label(row.wake_at)}); {len(done.woken)} active node(s) "
               "nudged", err=True)
