"""``fractal demo``: the offline demo, end to end."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("demo")
@click.argument("directory", required=False, default="./fractal-demo",
                type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True,
              help="Replace DIRECTORY if it is an earlier demo (or empty).")
def demo_cmd(directory: Path, force: bool) -> None:
    """Run the offline demo in DIRECTORY (default ./fractal-demo).

    Creates a sample project with a failing test, a tree and a node whose demo agent
    plans, fixes the bug and runs the tests through the loop in tmux, then prints the
    activity table and the node branch's git log. Exits 0 only if the node completed
    and the tests pass.
    """
    from fractal.cli.context import verb_context  # deferred: only this command needs it (1 module)
    from fractal.cli.format import render_rows  # deferred: only this command needs it (1 module)

    # deferred: only this command needs it (3 modules)
    from fractal.cli.node import _ACTIVITY_COLUMNS
    from fractal.demo.run import run_demo  # deferred: only this command needs it (35 modules)

    # deferred: only this command needs it (23 modules)
    from fractal.lifecycle.reads.nodes import activity
    from fractal.workspace.git import run_git  # deferred: only this command needs it (15 modules)

    result = run_demo(directory, force=force, echo=lambda line: click.echo(line, err=True))
    click.echo("\n== fractal node activity ==")
    rows = activity(verb_context(result.repo), result.branch, None)
    click.echo(render_rows(rows, _ACTIVITY_COLUMNS, fmt="table"))
    click.echo(f"\n== git log {result.branch} ==")
    log = run_git(["log", "--format=%h %s", result.branch], result.repo, check=False)
    click.echo(log.stdout.rstrip())
    verdict = "tests pass" if result.tests_pass else "tests still FAIL"
    click.echo(f"\ndemo: node {result.branch} {result.status}; {verdict}")
    if not result.ok:
        raise SystemExit(1)
