"""``fractal node merge``, ``node diff`` and ``node conflicts``: bring a child's work home."""

from __future__ import annotations

import json
from pathlib import Path

import click

from fractal.cli.context import PATH_OPTION, verb_context
from fractal.cli.format import format_options, output_format, render_rows


@click.command("merge")
@click.argument("node", required=False)
@click.option("--into", "into", default=None, metavar="BRANCH",
              help="Merge into BRANCH instead of the node's base or parent.")
@click.option("--hand-back", "hand_back", is_flag=True,
              help="On a conflict, hand it to the node: merge the target into its branch "
                   "(markers left) and start it again to resolve them.")
@click.option("--retire", "retire", is_flag=True,
              help="Once merged, retire NODE (and its subtree).")
@click.option("--delete", "delete", is_flag=True,
              help="Once merged, delete NODE (and its subtree).")
@click.option("--force", is_flag=True,
              help="Merge even when the node's last run exited or left a gate unapproved.")
@PATH_OPTION
def merge_cmd(node: str | None, into: str | None, hand_back: bool, retire: bool,
              delete: bool, force: bool, path: Path) -> None:
    """Squash-merge NODE's work into its target (its base, else its parent)."""
    # deferred: only this command needs it (84 modules)
    from fractal.lifecycle.merge.squash import merge_then_clean, outcome_line

    if retire and delete:
        raise click.UsageError("--retire and --delete exclude each other")
    then = "retire" if retire else "delete" if delete else None
    result = merge_then_clean(verb_context(path), node, into=into, hand_back=hand_back, force=force,
                              then=then)
    for notice in result.notices:
        click.echo(f"notice: {notice}", err=True)
    if result.status == "merged":
        assert result.squash_sha is not None
        click.echo(result.squash_sha)
    line = outcome_line(result)
    if line is not None:
        click.echo(line, err=True)


@click.command("diff")
@click.argument("node")
@click.option("--stat", "stat", is_flag=True, help="Only the diffstat.")
@PATH_OPTION
def diff_cmd(node: str, stat: bool, path: Path) -> None:
    """What merging NODE would bring into its target now (node directories excluded)."""
    # deferred: only this command needs it (48 modules)
    from fractal.lifecycle.merge.diff import node_diff

    result = node_diff(verb_context(path), node, stat=stat)
    for notice in result.notices:
        click.echo(f"notice: {notice}", err=True)
    if result.text:
        click.echo(result.text)


@click.command("conflicts")
@click.argument("node", required=False)
@format_options
@PATH_OPTION
def conflicts_cmd(node: str | None, as_json: bool, as_csv: bool, path: Path) -> None:
    """Whether NODE's children would conflict with its tip and with each other."""
    # deferred: only this command needs it (25 modules)
    from fractal.lifecycle.merge.conflicts import node_conflicts

    fmt = output_format(as_json, as_csv)
    report = node_conflicts(verb_context(path), node)
    rows = [{"left": p.left, "right": p.right, "conflicts": p.conflicts,
             "files": ", ".join(p.files)} for p in report.pairs]
    if as_json:
        click.echo(json.dumps({"node": report.node, "pairs": [
            {"left": p.left, "right": p.right, "conflicts": p.conflicts,
             "files": list(p.files)} for p in report.pairs]}, indent=2))
        return
    if not rows and not report.skipped:
        click.echo(f"{report.node} has no children to compare", err=True)
    elif report.skipped:
        # deferred: only this command needs it (5 modules)
        from fractal.domain.merge.conflicts import skipped_notice

        click.echo("notice: " + skipped_notice(report.node, report.skipped,
                                               compared=bool(rows)), err=True)
    click.echo(render_rows(rows, ["left", "right", "conflicts", "files"], fmt=fmt))
