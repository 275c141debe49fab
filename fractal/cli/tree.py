"""``fractal init``: root a tree at the current branch."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import IN_REPOSITORY, path_option, verb_context


@click.command("init")
@click.option("--agent", default=None, help="Default agent for the tree's nodes "
              "(claude, codex, or a command such as './my-agent --flag').")
@click.option("--max-depth", default=None, metavar="N",
              help="Levels of nodes the tree allows below its root (default 2: a lead and "
              "its children), or `unlimited`; a node inherits its parent's levels minus one.")
@click.option("--database", default=None, metavar="URL",
              help="Keep the tree's ledger in this PostgreSQL database "
              "(postgresql://USER@HOST/DB; the password from ~/.pgpass or PGPASSWORD) instead "
              "of .fractal/<branch>/fractal.db. FRACTAL_DATABASE_URL overrides it.")
@path_option(IN_REPOSITORY)
def init_cmd(agent: str | None, max_depth: str | None, database: str | None,
             path: Path) -> None:
    """Make the current branch the root (user node) of a tree.

    Creates .fractal/<branch>/ with the tree's config and database, and keeps runtime
    files out of git through .git/info/exclude. Safe to run again.
    """
    import os  # deferred: only this command needs it (0 modules)

    # deferred: only this command needs it (37 modules)
    from fractal.lifecycle.trees import init_tree

    # deferred: only this command needs it
    from fractal.store.backend import database_url, without_password

    result = init_tree(path, agent, max_depth, database, os.environ)
    url = database_url(result.tree.db_path)
    ledger = result.tree.db_path if url is None else without_password(url)
    verb = ("initialised" if result.created else
            f"already initialised (restored: {', '.join(result.restored)})" if result.restored
            else "already initialised")
    click.echo(f"{verb}: tree rooted at {result.tree.root} (database {ledger})",
               err=True)
    if agent is not None:
        click.echo(f"default agent for its nodes: {agent}", err=True)
        problem = _agent_problem(agent, result.tree.repo)
        if problem is not None:  # a warning: it may be installed before the first start
            click.echo(f"warning: {problem}; `fractal node start` will refuse until it is "
                       "fixed", err=True)
    click.echo("next: `fractal node init NAME --title '...' --task '...'` and "
               "`fractal node start NAME`", err=True)


def _agent_problem(agent: str, worktree: Path) -> str | None:
    """Why ``agent`` could not launch from ``worktree`` now (an unknown command, a missing
    or non-executable script, bad quoting), or None."""
    # deferred: only this command needs it (15 modules)
    from fractal.agents.base import binary_problem

    # deferred: only this command needs it (16 modules)
    from fractal.agents.registry import resolve_backend

    # deferred: only this command needs it (2 modules)
    from fractal.domain.errors import FractalError

    try:
        backend = resolve_backend(agent, worktree)
    except FractalError as exc:
        return str(exc)
    return binary_problem(backend.binary(), worktree)


@click.command("pause")
@click.argument("name", required=False)
@click.option("--reason", default=None, help="Why; recorded with every pause.")
@path_option(IN_REPOSITORY)
def pause_cmd(name: str | None, reason: str | None, path: Path) -> None:
    """Brake the whole tree NAME (default: this one): no start or spawn, every node paused."""
    # deferred: only this command needs it (52 modules)
    from fractal.lifecycle.steering.brake import brake

    results = brake(verb_context(path), name, reason)
    click.echo(f"tree paused ({sum(r.ok for r in results)} node(s) signalled); "
               "`fractal resume` lifts it", err=True)


@click.command("resume")
@click.argument("name", required=False)
@click.option("--refresh-env", is_flag=True,
              help="Relaunch with this shell's environment instead of the one each run "
                   "started with (prints the names that changed).")
@path_option(IN_REPOSITORY)
def resume_cmd(name: str | None, refresh_env: bool, path: Path) -> None:
    """Lift the tree-wide brake and resume every parked node, deepest first."""
    # deferred: only this command needs it (52 modules)
    from fractal.lifecycle.steering.brake import release

    results = release(verb_context(path), name, refresh_env=refresh_env)
    for result in results:
        if result.note:  # what a relaunch did to its kept environment (names only)
            click.echo(result.note, err=True)
    resumed = sum(r.ok for r in results)
    click.echo(f"tree resumed ({resumed} node(s))" if resumed else
               "tree brake lifted (if it was on); no paused node to resume", err=True)
