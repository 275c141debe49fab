"""``fractal commit``: the scoped, linted commit of one iteration's work (docs/commit.md)."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import NODE_WORKTREE, path_option, verb_context

_MODES = (("init_mode", "--init"), ("check", "--check"), ("ignore_scope", "--ignore-scope"),
          ("force", "--force"))


@click.command("commit")
@click.argument("message", required=False)
@click.option("--init", "init_mode", is_flag=True,
              help="The baseline commit: subject '<branch>: init (MESSAGE)'. The only "
                   "commit a node that never ran takes (it has no iteration to label one "
                   "with) and the only mode the tree's root accepts.")
@click.option("--check", is_flag=True,
              help="Commit nothing; fail if uncommitted changes exist.")
@click.option("--ignore-scope", is_flag=True,
              help="Commit changes outside the node's scope too (lint and hooks still run).")
@click.option("--force", is_flag=True,
              help="Bypass the scope check, scripts/lint.sh and git hooks.")
@path_option(NODE_WORKTREE)
def commit_cmd(message: str | None, init_mode: bool, check: bool, ignore_scope: bool,
               force: bool, path: Path) -> None:
    """Commit the node's work as '<branch>: iteration <run>.<iter> (MESSAGE)'.

    MESSAGE is a bare lowercase summary, e.g. "add tokenizer for string literals"; the branch
    and iteration are added for you. In order: scope check, scripts/lint.sh, scoped staging
    without runtime artifacts, warnings (ignored and 10 MB+ files), commit (one retry after
    pre-commit hooks rewrote files), push to origin unless the node is local. Prints the new
    commit's sha on stdout; notices and warnings go to stderr. Nothing to commit exits 0.
    """
    # deferred: only this command needs it (38 modules)
    from fractal.lifecycle.commit import CommitMode, commit_work

    flags = {"init_mode": init_mode, "check": check, "ignore_scope": ignore_scope,
             "force": force}
    chosen = [flag for name, flag in _MODES if flags[name]]
    if len(chosen) > 1:
        raise click.UsageError(f"{' and '.join(chosen)} are mutually exclusive; pass at most "
                               "one of --init, --check, --ignore-scope, --force")
    mode = {"--init": CommitMode.INIT, "--check": CommitMode.CHECK,
            "--ignore-scope": CommitMode.IGNORE_SCOPE,
            "--force": CommitMode.FORCE}.get(chosen[0] if chosen else "", CommitMode.ITERATION)
    if mode is CommitMode.CHECK and message is not None:
        raise click.UsageError("--check takes no MESSAGE")
    if mode is not CommitMode.CHECK and not (message or "").strip():
        raise click.UsageError('MESSAGE is required: a bare lowercase summary, e.g. '
                               'fractal commit "add tokenizer for string literals"')
    result = commit_work(verb_context(path), message, mode=mode)
    outcome = result.outcome
    for line in outcome.notices:
        click.echo(f"notice: {line}", err=True)
    for line in outcome.warnings:
        click.echo(f"warning: {line}", err=True)
    if outcome.sha is not None:
        click.echo(outcome.sha)
        click.echo(f"committed {outcome.sha[:10]} {outcome.subject} "
                   f"({len(outcome.files)} file(s))", err=True)
