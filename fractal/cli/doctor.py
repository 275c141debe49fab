"""``fractal doctor``: check a tree's files, branches, worktrees and database against each
other; one line per finding with its repair, exit 1 when anything is wrong."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import IN_REPOSITORY, path_option


@click.command("doctor")
@path_option(IN_REPOSITORY)
def doctor_cmd(path: Path) -> None:
    """Check the tree for inconsistencies; it only reads, and repairs nothing itself.

    Every registered node must have its branch, worktree and node dir; every worktree
    under .worktrees and every branch of the tree a registered node; the database must
    pass `PRAGMA integrity_check` and carry the current schema stamp; no node may be
    recorded active with its supervisor gone. Prints one line per finding (stdout)
    with the command that repairs it; exits 0 when the tree is consistent, 1 otherwise.
    """
    from fractal.lifecycle.doctor import doctor

    result = doctor(path)
    for finding in result.findings:
        click.echo(f"{finding.subject}: {finding.problem}; repair: {finding.repair}")
    count = len(result.findings)
    if count:
        click.echo(f"tree {result.tree.root}: {count} finding{'s' if count > 1 else ''}",
                   err=True)
        raise SystemExit(1)
    click.echo(f"tree {result.tree.root}: {result.nodes} node{'' if result.nodes == 1 else 's'}, "
               "database, branches and worktrees consistent", err=True)
