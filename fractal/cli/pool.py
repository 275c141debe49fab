"""``fractal pool ...``: a worker pool's items (status), a worker's result, the review's
rejections, and the dispatcher's round (run by the pool node's DISPATCH step)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from fractal.cli.context import PATH_OPTION, verb_context
from fractal.cli.format import format_options, output_format, render_rows

_COLUMNS = ("id", "status", "attempts", "worker", "result")


@click.group("pool")
def pool_group() -> None:
    """A worker pool's items, results and review (see `fractal node pool`)."""


@pool_group.command("status")
@click.argument("name", required=False)
@format_options
@PATH_OPTION
def status_cmd(name: str | None, as_json: bool, as_csv: bool, path: Path) -> None:
    """List the items of pool NAME (default: the caller's node)."""
    from fractal.domain.pool import progress  # deferred: only this command needs it (4 modules)

    # deferred: only this command needs it (37 modules)
    from fractal.lifecycle.pool import pool_view

    view = pool_view(verb_context(path), name)
    rows = [{"id": i.item_id, "status": i.status.value, "attempts": i.attempts,
             "worker": i.worker or "", "result": i.result} for i in view.items]
    if as_json:
        click.echo(json.dumps({"pool": view.pool, "max_workers": view.max_workers,
                               "review_done": view.review_done, "items": rows}, indent=2))
        return
    click.echo(render_rows(rows, _COLUMNS, fmt=output_format(False, as_csv)))
    done, failed, claimed, total = progress(view.items)
    click.echo(f"{view.pool}: {done} done, {failed} failed, {claimed} being worked, "
               f"{total - done - failed - claimed} open of {total}; "
               f"review {'done' if view.review_done else 'not run yet'}", err=True)


@pool_group.command("result")
@click.argument("text")
@PATH_OPTION
def result_cmd(text: str, path: Path) -> None:
    """Report this worker's one-line result (run by the worker, inside its node)."""
    from fractal.lifecycle.pool import report  # deferred: only this command needs it (37 modules)

    item = report(verb_context(path), text)
    click.echo(f"recorded the result of item {item.item_id}", err=True)


@pool_group.command("reject")
@click.argument("item_id", metavar="ID")
@click.option("--reason", required=True, metavar="TEXT", help="Why the item is rejected.")
@click.option("--pool", "pool", default=None, metavar="NAME",
              help="The pool (default: the caller's node).")
@PATH_OPTION
def reject_cmd(item_id: str, reason: str, pool: str | None, path: Path) -> None:
    """Send done item ID back to the pool for one more attempt (the review pass)."""
    from fractal.lifecycle.pool import reject  # deferred: only this command needs it (37 modules)

    item = reject(verb_context(path), item_id, reason, pool=pool)
    click.echo(f"rejected item {item.item_id}: open again (attempt {item.attempts + 1} "
               "of 2 next)", err=True)


@pool_group.command("dispatch")
@click.option("--resume", is_flag=True,
              help="Also put back claims whose worker never ran (the step's first round).")
@PATH_OPTION
def dispatch_cmd(resume: bool, path: Path) -> None:
    """One dispatch round of the pool whose loop runs it (its DISPATCH step runs this);
    prints the round as one JSON object: {"next", "reason", "notes"}."""
    from fractal.lifecycle.pool import dispatch  # deferred: only this command needs it (37 modules)

    done = dispatch(verb_context(path), resume=resume)
    for note in done.notes:
        click.echo(note, err=True)
    click.echo(json.dumps({"next": done.next, "reason": done.reason,
                           "notes": list(done.notes)}))
