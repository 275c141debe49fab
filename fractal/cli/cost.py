"""``fractal node cost spent|remaining|breakdown``: what a node and its subtree spent, and
what is left (docs/budgets.md)."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import PATH_OPTION, verb_context
from fractal.cli.format import format_options, notice, output_format, render_rows

DEPTH_OPTION = click.option(
    "--max-depth", type=click.IntRange(min=0), default=None,
    help="Count descendants at most N levels below the node (0: the node alone).")


def _scope_options(func: click.decorators.FC) -> click.decorators.FC:
    for flag, text in reversed((("step", "The newest step."),
                                ("iter", "The newest iteration's own steps."),
                                ("run", "The open (else last) run, with its descendants' runs."))):
        func = click.option(f"--{flag}", "scope", flag_value=flag, help=text)(func)
    return func


class _CostGroup(click.Group):
    """The ``cost`` group; a node name where a read belongs (``fractal node cost lead``)
    is refused with the reads that take it."""

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            reads = ", ".join(self.list_commands(ctx))
            raise click.UsageError(
                f"{name!r} is not a cost read ({reads}); to read a node's cost name the "
                f"read first, e.g. `fractal node cost spent {name}` or `fractal node cost "
                f"remaining {name}`", ctx)
        return super().resolve_command(ctx, args)


@click.group("cost", cls=_CostGroup)
def cost_group() -> None:
    """Read the budget ledger: spend and remaining budget, children included."""


@cost_group.command("spent")
@click.argument("node", required=False)
@_scope_options
@DEPTH_OPTION
@PATH_OPTION
def spent_cmd(node: str | None, scope: str | None, max_depth: int | None, path: Path) -> None:
    """Print what NODE and its subtree spent (all runs by default), or `untracked`."""
    # deferred: only this command needs it (28 modules)
    from fractal.lifecycle.reads.spending import Scope, spent

    report = spent(verb_context(path), node, Scope(scope or "all"), max_depth)
    click.echo(report.text)
    if report.unpriced:
        notice(f"{report.unpriced} launched step(s) recorded no cost (unpriced)")


@cost_group.command("remaining")
@click.argument("node", required=False)
@_scope_options
@PATH_OPTION
def remaining_cmd(node: str | None, scope: str | None, path: Path) -> None:
    """Print NODE's remaining budget for its run (default), iteration or step."""
    # deferred: only this command needs it (28 modules)
    from fractal.lifecycle.reads.spending import Scope, remaining

    click.echo(remaining(verb_context(path), node, Scope(scope or "run")))


@cost_group.command("breakdown")
@click.argument("node", required=False)
@click.option("--run", "run", is_flag=True, help="Only the open (else last) run's subtree.")
@DEPTH_OPTION
@format_options
@PATH_OPTION
def breakdown_cmd(node: str | None, run: bool, max_depth: int | None, as_json: bool,
                  as_csv: bool, path: Path) -> None:
    """Per-node spend of NODE's subtree (deleted nodes included)."""
    # deferred: only this command needs it (28 modules)
    from fractal.lifecycle.reads.spending import breakdown

    rows, unpriced = breakdown(verb_context(path), node, run=run, max_depth=max_depth)
    click.echo(render_rows(rows, ["node", "max_cost", "spent", "unpriced"],
                           fmt=output_format(as_json, as_csv)))
    if unpriced:
        notice(f"{unpriced} launched step(s) recorded no cost (unpriced)")
