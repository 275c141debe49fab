"""The one context a command builds for its verb (``fractal.lifecycle.context``).

A command body parses its options, builds the context here from ``--path``, calls one
verb with it and renders what the verb returns. Building it also notes the tree on the
command's ``CrashSite``, so an internal error after that point is logged in the tree's
``.fractal/<root>/logs/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context
    from fractal.tree import Tree

__all__ = ["note_tree", "verb_context"]


def verb_context(path: Path) -> Context:
    """The context of the caller at ``path`` (this process's environment decides whether it
    runs inside a node's loop). Raises NotATree, GitError."""
    from fractal.lifecycle.context import open_context
    from fractal.store import lockwait

    lockwait.set_wait_notice(_say_waiting)  # a verb that waits on a lock says so once
    ctx = open_context(path)
    note_tree(ctx.tree)
    return ctx


def _say_waiting(text: str) -> None:
    click.echo(f"fractal: {text}", err=True)


def note_tree(tree: Tree) -> None:
    """Tell the running command's CrashSite (when there is one) which tree it acts on."""
    from fractal.cli.crash import CrashSite

    current = click.get_current_context(silent=True)
    site = current.find_object(CrashSite) if current is not None else None
    if site is not None:
        site.data_dir = tree.data_dir
