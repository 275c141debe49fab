"""The one context a command builds for its verb (``fractal.lifecycle.context``), and
the ``--path`` option it is built from.

A command body parses its options, builds the context here from ``--path``, calls one
verb with it and renders what the verb returns. Building it also notes the tree on the
command's ``CrashSite``, so an internal error after that point is logged in the tree's
``.fractal/<root>/logs/``.

``--path`` is defined once, here (``path_option``; ``PATH_OPTION`` for the common
case), with the help line of the place the command acts from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context
    from fractal.tree import Tree

__all__ = ["IN_REPOSITORY", "IN_WORKTREE", "NODE_WORKTREE", "PATH_OPTION", "WORKTREE",
           "note_tree", "path_option", "verb_context"]

F = TypeVar("F", bound=Callable[..., object])

WORKTREE = "The caller's worktree (default: the current directory)."
"""``--path``'s help for a command that acts as the node whose worktree it names."""
NODE_WORKTREE = "The node's worktree (default: the current directory)."
"""``--path``'s help for a command that acts on the node whose worktree it names."""
IN_WORKTREE = "A directory inside the caller's worktree (default: the current one)."
"""``--path``'s help for a command that reads or writes files under the caller's worktree."""
IN_REPOSITORY = "A directory inside the repository (default: the current one)."
"""``--path``'s help for a command on the whole tree (any directory of its repository)."""


def path_option(help: str | None = WORKTREE, *,
                required: bool = False) -> Callable[[F], F]:
    """The ``--path`` option (parameter ``path``: an existing-or-not directory, a Path),
    with ``help`` (one of the lines above; None for a hidden command's). Without
    ``required`` it defaults to ``.``, the current directory; a required one has no
    default (the internal commands that are always handed a worktree)."""
    kind = click.Path(file_okay=False, path_type=Path)
    if required:
        return click.option("--path", "path", required=True, type=kind, help=help)
    return click.option("--path", "path", default=".", type=kind, help=help)


PATH_OPTION = path_option()
"""``--path`` as most commands take it: the caller's worktree, default ``.``."""


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
    from fractal.crashlog import CrashSite

    current = click.get_current_context(silent=True)
    site = current.find_object(CrashSite) if current is not None else None
    if site is not None:
        site.data_dir = tree.data_dir
