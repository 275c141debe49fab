"""``fractal node config get|set`` and ``fractal node update``: retune a node, live (docs/configuration.md:
which keys a running loop re-reads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fractal.cli.context import PATH_OPTION, verb_context
from fractal.cli.format import notice

# `node update` flags, in the order docs/cli.md lists them.
_UPDATE_FLAGS = (
    ("title", "A one-line title."),
    ("max_cost", "Run ceiling in USD (node plus descendants); null clears it."),
    ("max_iter_cost", "Per-iteration cap in USD."),
    ("max_step_cost", "Per-step cap in USD."),
    ("reserve_budget", "Wind-down reserve: USD or N% of max_cost (default: 10%)."),
    ("step_timeout", "Per-step ceiling, e.g. 10m."),
    ("max_depth", "Deepest level of descendants the node may spawn."),
    ("max_children", "Direct children the node may have."),
    ("max_descendants", "Descendants the node may have in all."),
)


@click.group("config")
def config_group() -> None:
    """Read or change the caller's config.json (typed and validated)."""


@config_group.command("get")
@click.argument("key")
@PATH_OPTION
def get_cmd(key: str, path: Path) -> None:
    """Print KEY's value (`null` when unset)."""
    from fractal.lifecycle.retune import config_get

    value = config_get(verb_context(path), key)
    click.echo(value if isinstance(value, str) else json.dumps(value))


@config_group.command("set")
@click.argument("assignments", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("--node", "node", default=None, metavar="NODE",
              help="Set NODE's config instead of the caller's (its parent, an ancestor or "
                   "the operator).")
@PATH_OPTION
def set_cmd(assignments: tuple[str, ...], node: str | None, path: Path) -> None:
    """Set KEY=VALUE pairs; KEY=null clears a key. Echoes `key: old -> new`. A node
    setting its own keys may only tighten its limits."""
    from fractal.lifecycle.retune import config_set

    done = config_set(verb_context(path), list(assignments), node)
    for change in done.changes:
        click.echo(change.line)
    if not done.changes:
        notice("nothing changed")


def _update_options(func: Any) -> Any:
    for key, text in reversed(_UPDATE_FLAGS):
        flag = "--" + key.replace("_", "-")
        func = click.option(flag, key, default=None, metavar="VALUE", help=text)(func)
    return func


@click.command("update")
@click.argument("node")
@_update_options
@PATH_OPTION
def update_cmd(node: str, path: Path, **values: str | None) -> None:
    """Retune NODE: write its config.json and registry row together; a running node
    picks the change up at its next iteration."""
    from fractal.lifecycle.retune import update_node

    done = update_node(verb_context(path), node, values)
    for change in done.changes:
        click.echo(change.line)
    if not done.changes:
        notice("nothing changed")
