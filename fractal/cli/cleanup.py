"""``fractal node retire|unretire|delete``, ``fractal reset|destroy``: clean a tree up."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fractal.cli.context import PATH_OPTION, verb_context

NO_QUESTION = click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
"""``--force`` of the verbs that remove the whole tree's nodes (reset, destroy)."""


@click.command("retire")
@click.argument("node")
@click.option("--reason", default=None, help="Why; recorded with the retire event.")
@click.option("--force", is_flag=True,
              help="Retire over uncommitted files (saved on a rescue ref first).")
@PATH_OPTION
def retire_cmd(node: str, reason: str | None, force: bool, path: Path) -> None:
    """Retire a settled NODE and its subtree: worktrees removed, branches and rows kept."""
    from fractal.lifecycle.retire import retire

    for item in retire(verb_context(path), node, reason=reason, force=force):
        saved = f"; unsaved files on {item.rescue_ref}" if item.rescue_ref else ""
        click.echo(item.branch)
        click.echo(f"retired {item.branch} (was {item.before}){saved}", err=True)


@click.command("unretire")
@click.argument("node")
@PATH_OPTION
def unretire_cmd(node: str, path: Path) -> None:
    """Bring a retired NODE (and its retired descendants) back with its worktree."""
    from fractal.lifecycle.retire import unretire

    for item in unretire(verb_context(path), node):
        if item.note:
            click.echo(f"kept {item.branch} retired: {item.note}", err=True)
            continue
        click.echo(item.branch)
        click.echo(f"unretired {item.branch} ({item.after})", err=True)


@click.command("delete")
@click.argument("node")
@click.option("--force", is_flag=True,
              help="Delete over unmerged commits and uncommitted files (a rescue ref keeps "
                   "them).")
@PATH_OPTION
def delete_cmd(node: str, force: bool, path: Path) -> None:
    """Delete NODE and its subtree: worktrees, branches and registry rows (history stays)."""
    from fractal.lifecycle.delete import delete

    for item in delete(verb_context(path), node, force=force):
        click.echo(item.branch)
        kept = f"; rescue ref {item.rescue_ref}" if item.rescue_ref else \
            "; its branch and worktree were already gone: nothing to rescue"
        click.echo(f"deleted {item.branch}{kept}", err=True)


def _confirm(verb: str, path: Path, force: bool, extra: str) -> None:
    from fractal.errors import FractalError
    from fractal.lifecycle.teardown import plan

    if force:
        return
    nodes = plan(verb_context(path))
    listing = ", ".join(nodes) if nodes else "no nodes"
    if not sys.stdin.isatty():
        raise FractalError(f"{verb} removes {listing}{extra}; pass --force to confirm "
                           "(stdin is not a terminal)")
    click.confirm(f"{verb} removes {listing}{extra} (each branch saved on a rescue ref "
                  "first). Continue?", abort=True, err=True)


@click.command("reset")
@NO_QUESTION
@PATH_OPTION
def reset_cmd(force: bool, path: Path) -> None:
    """Remove every node of the tree; keep the root, the database history, rescue refs."""
    from fractal.lifecycle.teardown import reset

    _confirm("reset", path, force, "")
    done = reset(verb_context(path))
    for item in done.nodes:
        click.echo(item.branch)
    click.echo(f"reset {done.root}: {len(done.nodes)} node(s) removed; their branches are on "
               "rescue refs (`fractal rescue list`)", err=True)


@click.command("destroy")
@NO_QUESTION
@PATH_OPTION
def destroy_cmd(force: bool, path: Path) -> None:
    """Undo `fractal init` for the tree: every node, then the database and config."""
    from fractal.lifecycle.teardown import destroy

    _confirm("destroy", path, force, " and the tree's database")
    done = destroy(verb_context(path))
    for item in done.nodes:
        click.echo(item.branch)
    click.echo(f"destroyed the tree {done.root}: {len(done.nodes)} node(s) and {done.data_dir} "
               "removed; rescue refs kept (`fractal rescue list`)", err=True)
