"""``fractal plan ...``: the caller's node's plan files (``PLANS_DIR``)."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import IN_WORKTREE, path_option, verb_context
from fractal.cli.format import format_options, output_format, render_rows

PATH_OPTION = path_option(IN_WORKTREE)


@click.group("plan")
def plan_group() -> None:
    """Create and list the node's plans (plans/<stamp>-<run.iter>-<slug>.md)."""


@plan_group.command("init")
@click.option("--name", required=True, help="The plan's slug, e.g. parser-rewrite.")
@click.option("--title", default=None, help="Its H1 (default: the slug's words).")
@click.option("--iter-ref", default=None, metavar="RUN.ITER",
              help="The iteration it belongs to (default: $ITER_REF, else the latest).")
@PATH_OPTION
def init_cmd(name: str, title: str | None, iter_ref: str | None, path: Path) -> None:
    """Create a plan file with its title and print its absolute path."""
    # deferred: only this command needs it (13 modules)
    from fractal.lifecycle.plans import new_plan

    click.echo(new_plan(verb_context(path), name, title=title, iter_ref=iter_ref))


@plan_group.command("list")
@click.option("--iter-ref", default=None, metavar="RUN.ITER", help="Only this iteration's.")
@format_options
@PATH_OPTION
def list_cmd(iter_ref: str | None, as_json: bool, as_csv: bool, path: Path) -> None:
    """List the node's plans, oldest first."""
    # deferred: only this command needs it (13 modules)
    from fractal.lifecycle.plans import list_plans

    rows = list_plans(verb_context(path), iter_ref=iter_ref)
    click.echo(render_rows(rows, ["created", "iter_ref", "slug", "title", "path"],
                           fmt=output_format(as_json, as_csv)))
